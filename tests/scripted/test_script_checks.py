import json
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.model import get_model

from inspect_swarm.scripted import Script, scripted_model


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"submit": "1", "tool": "bash"}, "submit='1' and tool='bash'"),
        ({"arguments": {"cmd": "ls"}}, "`arguments` needs `tool`"),
        ({"error": "boom", "text": "hi"}, "error='boom' makes the call raise"),
        ({"delay": 1}, "an empty step"),
        ({"sumbit": "1"}, "sumbit"),
        ({"text": "x", "delay": -1}, "delay"),
        ({"text": "x", "stop_reason": "tired"}, "stop_reason"),
        ({"submit": "1", "usage": {"input_tokens": -5}}, "input_tokens"),
        ({"text": "x", "after": "later"}, "after"),
        ({"text": "x", "after": {"member": "w-1", "step": 0}}, "step"),
    ],
)
def test_bad_steps_are_refused_with_the_field(step: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="The scripted model's `script` is not valid") as info:
        scripted_model({"members": {"*": [step]}})
    assert message in str(info.value)


def test_unknown_script_key_is_refused() -> None:
    with pytest.raises(ValueError, match="member"):
        scripted_model({"member": {"*": ["x"]}})


def test_a_script_is_required() -> None:
    with pytest.raises(ValueError, match=r"scripted/nothing needs a script: pass -M script="):
        get_model("scripted/nothing", memoize=False)


def test_unknown_model_args_are_refused() -> None:
    with pytest.raises(ValueError, match=r"only the model arg `script`, not \['temperature'\]"):
        get_model("scripted/x", memoize=False, script=["x"], temperature=1)


def test_missing_script_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(FileNotFoundError, match=f"`script` file '{missing}' does not exist"):
        get_model("scripted/x", memoize=False, script=str(missing))


def test_invalid_script_file_names_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("members:\n  '*': [{submit: 1, tool: bash}]\n")
    with pytest.raises(ValueError, match=f"`script` file '{bad}' is not valid"):
        scripted_model(bad)


def test_yaml_and_json_files_load_the_same_script(tmp_path: Path) -> None:
    data = {
        "members": {"w-*": [{"submit": "42"}, "text"]},
        "samples": {"7": {"*": [{"tool": "bash", "arguments": {"cmd": "ls"}}]}},
        "then": {"stop_reason": "model_length"},
        "usage": {"input_tokens": 3, "output_tokens": 4},
        "price": None,
    }
    (tmp_path / "s.json").write_text(json.dumps(data))
    (tmp_path / "s.yaml").write_text(
        "members:\n"
        "  w-*:\n"
        "    - submit: 42\n"
        "    - text\n"
        "samples:\n"
        "  7:\n"
        "    '*': [{tool: bash, arguments: {cmd: ls}}]\n"
        "then: {stop_reason: model_length}\n"
        "usage: {input_tokens: 3, output_tokens: 4}\n"
        "price: null\n"
    )
    scripts = [
        Script.model_validate(data),
        get_model("scripted/j", memoize=False, script=str(tmp_path / "s.json")).api.script,  # type: ignore[attr-defined]
        get_model("scripted/y", memoize=False, script=tmp_path / "s.yaml").api.script,  # type: ignore[attr-defined]
    ]
    assert scripts[0] == scripts[1] == scripts[2]
    assert scripts[0].members["w-*"][0].submit == "42"
    assert scripts[0].price is None


def test_patterns_exact_name_first_then_in_order() -> None:
    script = Script.model_validate(
        {
            "members": {"*": ["any"], "alice": ["exact"], "a*": ["prefix"]},
            "samples": {"s": {"b*": ["sample"]}},
        }
    )

    def first_text(member: str, sample: str | None = None) -> str | None:
        steps = script.steps_for(member, sample)
        return None if steps is None else steps[0].text

    assert first_text("alice") == "exact"
    assert first_text("adam") == "any"
    assert first_text("bob", "s") == "sample"
    assert first_text("bob", "other") == "any"
    assert Script.model_validate({"members": {"a*": ["x"]}}).steps_for("bob", None) is None
