"""The compose a swarm with per-member sandboxes needs, checked offline for Inspect's `k8s`
provider (package `inspect-k8s-sandbox`): its own conversion to the values of its Helm chart,
then the chart's schema, as `helm install` would check them. What needs a cluster (that the
pods start, and reach each other) is not checked here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import k8s_sandbox
import pytest
import yaml
from k8s_sandbox.compose._converter import convert_compose_to_helm_values

_CHART = Path(k8s_sandbox.__file__).parent / "resources" / "helm" / "agent-env"

MEMBERS = ["agent-1", "agent-2", "agent-3"]
"""The sandboxes of `member(..., name="agent", count=3, sandbox="{member}")`."""


def _service(volume: bool) -> dict[str, Any]:
    service: dict[str, Any] = {"image": "python:3.12-slim", "command": "tail -f /dev/null"}
    if volume:
        service["volumes"] = ["shared:/shared"]
    return service


def helm_values(tmp_path: Path, compose: dict[str, Any]) -> dict[str, Any]:
    """The chart's values for `compose`, as the provider makes them, over the chart's own
    defaults; refused as `helm install` would refuse them."""
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(compose))
    values = {**yaml.safe_load((_CHART / "values.yaml").read_text())}
    values.update(convert_compose_to_helm_values(path))
    jsonschema.validate(values, json.loads((_CHART / "values.schema.json").read_text()))
    return values


@pytest.mark.parametrize("shared_volume", [False, True])
def test_a_service_per_member_and_a_default_one_is_valid_for_k8s(
    tmp_path: Path, shared_volume: bool
) -> None:
    services = {name: _service(shared_volume) for name in ["default", *MEMBERS]}
    compose: dict[str, Any] = {"services": services}
    if shared_volume:
        compose["volumes"] = {"shared": None}
    values = helm_values(tmp_path, compose)
    assert sorted(values["services"]) == sorted(["default", *MEMBERS])
    assert ("shared" in values.get("volumes", {})) is shared_volume


def test_without_a_default_service_k8s_renames_a_members_service(tmp_path: Path) -> None:
    # the provider names `default` the service marked x-default, else the first: that member
    # would find no sandbox of its name (the swarm refuses it when it starts)
    marked = {name: _service(False) for name in MEMBERS}
    marked["agent-2"]["x-default"] = True
    assert sorted(helm_values(tmp_path, {"services": marked})["services"]) == [
        "agent-1",
        "agent-3",
        "default",
    ]
    unmarked = {name: _service(False) for name in MEMBERS}
    assert "agent-1" not in helm_values(tmp_path, {"services": unmarked})["services"]
