"""Attacks on /openapi.json: the one route that needs no key must give nothing away."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import httpx

from .conftest import KEY, OTHER_KEY, Server


def test_the_api_document_leaks_no_key_path_or_address(server: Server) -> None:
    # read as anyone may: no key, a wrong one, an id-like path appended
    answers = [
        httpx.get(f"{server.url}/openapi.json", timeout=30),
        httpx.get(f"{server.url}/openapi.json", headers={"Authorization": "Bearer x"}, timeout=30),
    ]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].content == answers[1].content
    text = answers[0].text
    json.loads(text)
    secrets = [KEY, OTHER_KEY]
    places = [
        str(server.state_dir),
        str(server.state_dir.parent),
        str(Path.home()),
        sys.prefix,
        os.getcwd(),
        server.url,
        server.url.rsplit(":", 1)[-1],  # the port
        socket.gethostname(),
    ]
    for leaked in [*secrets, *places]:
        assert leaked not in text, f"the document holds {leaked!r}"
    # and it names no route it would not answer: the daemon's and the tests' own are left out
    assert "/files" not in json.loads(text)["paths"]


def test_the_document_is_not_a_way_around_the_keys(server: Server) -> None:
    # every other route still wants a key, the ones the document lists included
    paths = json.loads(httpx.get(f"{server.url}/openapi.json", timeout=30).text)["paths"]
    refused = []
    for path, operations in paths.items():
        if path == "/healthz":
            continue
        concrete = path.replace("{run_id}", "abc").replace("{sandbox_id}", "sbx-abc")
        for method in operations:
            answer = httpx.request(method.upper(), f"{server.url}{concrete}", timeout=30)
            refused.append((method, path, answer.status_code))
    assert refused and all(status == 401 for _, _, status in refused), refused
