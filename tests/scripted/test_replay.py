"""Replaying a swarm from its log: the examples run on their scripts, `inspect-swarm replay`
writes the script of each log, and the replay gives the same records and transcripts."""

import importlib
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.event import ModelEvent, SpanBeginEvent, ToolEvent
from inspect_ai.log import EvalLog, EvalSample
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessageAssistant,
    Model,
    ModelAPI,
    ModelOutput,
    get_model,
    modelapi,
)
from inspect_ai.scorer import match
from inspect_ai.tool import ToolCall

from inspect_swarm import Budget, leaderless, member, swarm
from inspect_swarm._contracts._schema import LEDGER_KEY, METRICS_KEY, RESULT_KEY
from inspect_swarm.cli._main import main
from inspect_swarm.scripted import Script, Step, replay_script, scripted_model
from inspect_swarm.scripted._script import Hold

from .test_scripted_model import add

EXAMPLES = Path(__file__).parents[2] / "examples"

# what the wall clock decides: when each member ended, how long it ran or waited
TIMES = {"time", "running_time", "wall_clock", "first_pass_time", "wait_time", "idle_time"}


def without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-6, abs=1e-12)
    return value


def evaluate(task: Task, model: Model, log_dir: Path) -> EvalLog:
    [log] = eval(task, model=model, log_dir=str(log_dir), display="none")
    assert log.status == "success" and log.samples
    return log


def member_of(sample: EvalSample) -> dict[str, str]:
    """The member each span belongs to."""
    begins = {e.id: e for e in sample.events if isinstance(e, SpanBeginEvent)}
    names = {m["name"] for m in sample.store[RESULT_KEY]["members"]}
    found: dict[str, str] = {}
    for span_id in begins:
        at: str | None = span_id
        while at in begins and not (begins[at].name in names and begins[at].type == "agent"):
            at = begins[at].parent_id
        if at is not None and at in begins:
            found[span_id] = begins[at].name
    return found


def transcripts(sample: EvalSample) -> dict[str, list[Any]]:
    """What each member's model said and what its tools answered, in order."""
    spans = member_of(sample)
    said: dict[str, list[Any]] = {}
    for event in sample.events:
        name = spans.get(event.span_id or "")
        if name is None:
            continue
        if isinstance(event, ModelEvent) and not event.pending:
            message = event.output.message
            calls = [(c.function, c.arguments) for c in message.tool_calls or []]
            said.setdefault(name, []).append(("model", message.text, calls))
        elif isinstance(event, ToolEvent):
            said.setdefault(name, []).append(("tool", event.function, str(event.result)))
    return said


def assert_replayed(original: EvalLog, replayed: EvalLog) -> None:
    assert original.samples and replayed.samples
    pairs = {(s.id, s.epoch): s for s in replayed.samples}
    assert set(pairs) == {(s.id, s.epoch) for s in original.samples}
    for before in original.samples:
        after = pairs[(before.id, before.epoch)]
        assert after.error is None, after.error
        for key in (RESULT_KEY, LEDGER_KEY, METRICS_KEY):
            assert without_times(after.store[key]) == without_times(before.store[key]), key
        assert after.output.completion == before.output.completion
        assert after.scores is not None and before.scores is not None
        assert {k: s.value for k, s in after.scores.items()} == {
            k: s.value for k, s in before.scores.items()
        }
        assert transcripts(after) == transcripts(before)


def example_task(
    module: str, task: str, args: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Task:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    made: Task = getattr(importlib.import_module(module), task)(**args)
    return made


EXAMPLE_RUNS = [
    # three samples; leaderless stops at the first submission
    ("getting_started", "getting_started", {}, "getting_started.yaml"),
    # the shared-memory board: w-1 waits for w-2's part and reads both
    ("shared_memory", "shared_memory_count", {}, "shared_memory.yaml"),
    # a controller that stops on a check: members end submitted, at their limit and stopped
    ("stop_on_proof", "stop_on_proof", {}, "stop_on_proof.yaml"),
    # sandboxes of their own, the board and a comparator that checks what each left
    ("proof_swarm", "proof_swarm", {}, "proof_swarm_script.yaml"),
    # a controller on the board that stops when every member left only waits
    ("topologies", "topologies", {"topology": "quiescence"}, "topologies.yaml"),
]


@pytest.mark.parametrize(("module", "task", "args", "script"), EXAMPLE_RUNS)
def test_the_replay_of_an_example_gives_its_records_and_transcripts(
    backend: str,
    module: str,
    task: str,
    args: dict[str, Any],
    script: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    original = evaluate(
        example_task(module, task, args, monkeypatch),
        scripted_model(EXAMPLES / script, name="demo"),
        tmp_path / "original",
    )
    assert original.location is not None
    assert main(["replay", original.location, "-o", "replay.yaml"]) == 0
    replayed = evaluate(
        example_task(module, task, args, monkeypatch),
        scripted_model(tmp_path / "replay.yaml", name="replay"),
        tmp_path / "replayed",
    )
    assert_replayed(original, replayed)


def racing_task(grace: float = 120.0) -> Task:
    return Task(
        dataset=[Sample(id="q", input="What is 6 times 7?", target="42")],
        solver=swarm(
            members=member(react, count=2),
            controller=leaderless(),
            channels=[],
            budget=Budget(grace=grace),
        ),
    )


def test_the_replay_keeps_who_submitted_first_whatever_the_timing(
    backend: str, tmp_path: Path
) -> None:
    # in the log, react-1 submits first and react-2 in the grace after the stop; the replay has
    # no delays, and react-2 still submits second, after the stop
    slow_first = {
        "members": {
            "react-1": [{"submit": "41", "delay": 0.3}],
            "react-2": [{"submit": "42", "delay": 0.6}],
        }
    }
    original = evaluate(racing_task(), scripted_model(slow_first, name="a"), tmp_path)
    script = replay_script(original)
    [sample] = original.samples or []
    assert sample.store[RESULT_KEY]["final"]["member"] == "react-1"
    steps = script.samples["q"]
    assert [s.delay for table in steps.values() for s in table] == [0.0, 0.0]
    assert Hold.of(steps["react-2"][0].after).stop
    replayed = evaluate(racing_task(), scripted_model(script, name="b"), tmp_path)
    assert_replayed(original, replayed)


def test_a_call_the_stop_cancelled_hangs_in_the_replay(backend: str, tmp_path: Path) -> None:
    script = {
        "members": {
            "react-1": [{"submit": "42"}],
            "react-2": [{"text": "Still thinking.", "delay": 60}],
        }
    }
    # no grace: the stop cancels react-2's call at once
    original = evaluate(racing_task(grace=0), scripted_model(script, name="a"), tmp_path)
    replay = replay_script(original)
    assert replay.samples["q"]["react-2"] == [Step(hang=True)]
    replayed = evaluate(racing_task(grace=0), scripted_model(replay, name="b"), tmp_path)
    assert_replayed(original, replayed)


def test_a_member_the_stop_refused_a_call_is_refused_it_again(backend: str, tmp_path: Path) -> None:
    # react-2's first call returns in the grace after react-1's submission stopped the swarm,
    # and the swarm refuses its next call; the replay's react-2 is refused that call too
    script = {
        "members": {
            "react-1": [{"submit": "42", "delay": 0.2}],
            "react-2": [{"text": "Hmm.", "delay": 0.4}, {"submit": "41"}],
        }
    }
    original = evaluate(racing_task(), scripted_model(script, name="a"), tmp_path)
    [sample] = original.samples or []
    statuses = {m["name"]: m["status"] for m in sample.store[RESULT_KEY]["members"]}
    assert statuses == {"react-1": "submitted", "react-2": "stopped"}
    replay = replay_script(original)
    assert replay.samples["q"]["react-2"][-1] == Step(refused=True)
    replayed = evaluate(racing_task(), scripted_model(replay, name="b"), tmp_path)
    assert_replayed(original, replayed)


def test_the_replay_takes_the_usage_and_price_of_the_logged_calls(tmp_path: Path) -> None:
    script = {
        "members": {
            "react-*": [{"text": "Hmm.", "usage": {"input_tokens": 300}}, "Aha.", {"submit": "42"}]
        },
        "usage": {"input_tokens": 50, "output_tokens": 5},
        "price": {"input": 2.0, "output": 8.0},
    }
    original = evaluate(racing_task(), scripted_model(script, name="a"), tmp_path)
    replay = replay_script(original)
    # the usage most calls had is the script's; a step with another gives its own
    assert (replay.usage.input_tokens, replay.usage.output_tokens) == (50, 5)
    first = replay.samples["q"]["react-1"][0].usage
    assert first is not None and (first.input_tokens, first.output_tokens) == (300, 5)
    assert [s.usage for s in replay.samples["q"]["react-1"][1:]] == [None, None]
    assert replay.price is not None
    assert (replay.price.input, replay.price.output) == pytest.approx((2.0, 8.0))
    assert Script.model_validate_json(replay.model_dump_json()) == replay


@modelapi(name="canned")
class CannedAPI(ModelAPI):
    """A provider that answers with the outputs it is given, in order (offline)."""

    def __init__(self, model_name: str, outputs: list[ModelOutput], **kwargs: Any) -> None:
        super().__init__(model_name)
        self.outputs = iter(outputs)

    async def generate(self, *args: Any, **kwargs: Any) -> ModelOutput:
        return next(self.outputs)

    async def count_text_tokens(self, text: str) -> int:
        return len(text)


def test_a_log_of_another_model_replays_with_parallel_tool_calls(tmp_path: Path) -> None:
    # any model's log: here a provider of the test's own, one agent outside every swarm
    # (`main`), whose first message makes two tool calls at once
    first = ModelOutput(
        model="model",
        choices=[
            ChatCompletionChoice(
                message=ChatMessageAssistant(
                    content="Adding both.",
                    tool_calls=[
                        ToolCall(id="a", function="add", arguments={"x": 1, "y": 2}),
                        ToolCall(id="b", function="add", arguments={"x": 3, "y": 4}),
                    ],
                ),
                stop_reason="tool_calls",
            )
        ],
    )
    answer = ModelOutput.for_tool_call("model", "submit", {"answer": "3"})
    task = Task(
        dataset=[Sample(id=7, input="What is 1 + 2?", target="3")],
        solver=react(tools=[add()]),
        scorer=match(),
    )
    original = evaluate(task, get_model("canned/model", outputs=[first, answer]), tmp_path)
    replay = replay_script(original)
    [step, last] = replay.samples["7"]["main"]
    assert step.text == "Adding both." and step.calls is not None and len(step.calls) == 2
    assert last.submit == "3"
    replayed = evaluate(task, scripted_model(replay), tmp_path)
    [before] = original.samples or []
    [after] = replayed.samples or []

    def said(sample: EvalSample) -> list[tuple[str, str, list[Any]]]:
        return [
            (m.role, m.text, [(c.function, c.arguments) for c in m.tool_calls or []])
            if isinstance(m, ChatMessageAssistant)
            else (m.role, m.text, [])
            for m in sample.messages
        ]

    assert said(after) == said(before)
    assert after.scores is not None and after.scores["match"].value == "C"
