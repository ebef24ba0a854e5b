from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai import Task, eval, eval_async
from inspect_ai.agent import Agent, AgentState, agent, react
from inspect_ai.dataset import Sample
from inspect_ai.event import InfoEvent, ModelEvent
from inspect_ai.log import EvalLog, EvalSample
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, Model, ModelOutput
from inspect_ai.scorer import match
from inspect_ai.solver import Solver
from inspect_ai.tool import Tool, tool

from inspect_swarm import leaderless, member, rounds, swarm, vote
from inspect_swarm._context import _member
from inspect_swarm.scripted import ScriptError, scripted_model


@tool
def add() -> Tool:
    async def execute(x: int, y: int) -> str:
        """Add two numbers.

        Args:
            x: First number.
            y: Second number.
        """
        return str(x + y)

    return execute


def run(
    model: Model,
    log_dir: Path,
    *,
    solver: Solver | Agent | None = None,
    samples: list[Sample] | None = None,
    **kwargs: Any,
) -> EvalLog:
    task = Task(
        dataset=samples or [Sample(id="q", input="What is 1 + 2?", target="3")],
        solver=solver or react(tools=[add()]),
        scorer=match(),
    )
    [log] = eval(task, model=model, display="none", log_dir=str(log_dir), **kwargs)
    return log


def only_sample(log: EvalLog) -> EvalSample:
    assert log.samples is not None
    [sample] = log.samples
    return sample


def model_events(sample: EvalSample) -> list[ModelEvent]:
    return [event for event in sample.events if isinstance(event, ModelEvent)]


def assistant_messages(sample: EvalSample) -> list[ChatMessageAssistant]:
    return [m for m in sample.messages if isinstance(m, ChatMessageAssistant)]


def test_submit_calls_the_submit_tool(tmp_path: Path) -> None:
    sample = only_sample(run(scripted_model([{"submit": "3"}]), tmp_path))
    assert sample.output.completion == "3"
    assert sample.scores is not None and sample.scores["match"].value == "C"
    [event] = model_events(sample)
    [call] = event.output.message.tool_calls or []
    assert (call.function, call.arguments) == ("submit", {"answer": "3"})
    assert event.output.stop_reason == "tool_calls"


def test_tool_step_calls_the_tool_with_its_arguments(tmp_path: Path) -> None:
    script = [{"tool": "add", "arguments": {"x": 1, "y": 2}}, {"submit": "3"}]
    sample = only_sample(run(scripted_model(script), tmp_path))
    [tool_message] = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
    assert (tool_message.function, tool_message.text) == ("add", "3")
    calls = [c for e in model_events(sample) for c in e.output.message.tool_calls or []]
    assert [c.function for c in calls] == ["add", "submit"]
    assert len({c.id for c in calls}) == 2


def test_calls_step_makes_several_tool_calls_in_order(tmp_path: Path) -> None:
    both = {
        "calls": [
            {"tool": "add", "arguments": {"x": 1, "y": 2}},
            {"tool": "add", "arguments": {"x": 3, "y": 4}},
        ]
    }
    sample = only_sample(run(scripted_model([both, {"submit": "3"}]), tmp_path))
    results = [m.text for m in sample.messages if isinstance(m, ChatMessageTool)]
    assert results == ["3", "7"]
    first = model_events(sample)[0].output.message.tool_calls or []
    assert [c.arguments for c in first] == [{"x": 1, "y": 2}, {"x": 3, "y": 4}]


def test_text_step_returns_text_with_stop(tmp_path: Path) -> None:
    sample = only_sample(run(scripted_model(["Let me think.", {"submit": "3"}]), tmp_path))
    first = model_events(sample)[0]
    assert first.output.completion == "Let me think."
    assert first.output.stop_reason == "stop"
    assert not first.output.message.tool_calls
    assert sample.output.completion == "3"


def test_text_alongside_a_tool_call(tmp_path: Path) -> None:
    sample = only_sample(run(scripted_model([{"text": "Done:", "submit": "3"}]), tmp_path))
    [event] = model_events(sample)
    assert event.output.message.text == "Done:"
    assert [c.function for c in event.output.message.tool_calls or []] == ["submit"]


def test_model_length_ends_react(tmp_path: Path) -> None:
    script = {"members": {"*": [{"text": "cut", "stop_reason": "model_length"}]}}
    sample = only_sample(run(scripted_model(script), tmp_path))
    assert sample.output.stop_reason == "model_length"
    assert sample.error is None
    assert len(model_events(sample)) == 1


def test_content_filter_repeated_by_then(tmp_path: Path) -> None:
    # react gives up after three refusals in a row
    script = {"then": {"stop_reason": "content_filter"}}
    sample = only_sample(run(scripted_model(script), tmp_path))
    events = model_events(sample)
    assert [e.output.stop_reason for e in events] == ["content_filter"] * 3
    assert sample.output.completion == ""


def test_default_usage_and_price_are_recorded(tmp_path: Path) -> None:
    script = [{"tool": "add", "arguments": {"x": 1, "y": 2}}, {"submit": "3"}]
    sample = only_sample(run(scripted_model(script, name="priced"), tmp_path))
    usage = sample.model_usage["scripted/priced"]
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (200, 20, 220)
    # two calls of 100 input tokens at $10/M and 10 output tokens at $100/M
    assert usage.total_cost == pytest.approx(0.004)


def test_script_usage_price_and_step_usage(tmp_path: Path) -> None:
    script = {
        "members": {"*": [{"text": "a", "usage": {"output_tokens": 50}}, {"submit": "3"}]},
        "usage": {"input_tokens": 1000, "output_tokens": 5},
        "price": {"input": 1.0, "output": 2.0},
    }
    sample = only_sample(run(scripted_model(script, name="custom"), tmp_path))
    usage = sample.model_usage["scripted/custom"]
    assert (usage.input_tokens, usage.output_tokens) == (2000, 55)
    assert usage.total_cost == pytest.approx((2000 * 1.0 + 55 * 2.0) / 1e6)


def test_helper_usage_and_price_replace_the_scripts(tmp_path: Path) -> None:
    model = scripted_model(
        {"members": {"*": [{"submit": "3"}]}, "price": {"input": 5, "output": 5}},
        name="override",
        usage={"input_tokens": 7, "output_tokens": 3},
        price={"input": 1_000_000, "output": 0},
    )
    usage = only_sample(run(model, tmp_path)).model_usage["scripted/override"]
    assert (usage.input_tokens, usage.output_tokens) == (7, 3)
    assert usage.total_cost == pytest.approx(7.0)


def test_unpriced_model_has_no_cost(tmp_path: Path) -> None:
    # a price registered earlier under the same name must not linger
    scripted_model([{"submit": "3"}], name="unpriced")
    model = scripted_model([{"submit": "3"}], name="unpriced", price=None)
    usage = only_sample(run(model, tmp_path)).model_usage["scripted/unpriced"]
    assert usage.total_tokens == 110
    assert usage.total_cost is None


def test_price_null_in_script_makes_model_unpriced(tmp_path: Path) -> None:
    model = scripted_model({"members": {"*": [{"submit": "3"}]}, "price": None}, name="null")
    assert only_sample(run(model, tmp_path)).model_usage["scripted/null"].total_cost is None


def test_cost_limit_is_enforced(tmp_path: Path) -> None:
    # each call costs $0.002; the limit is reached on the third call
    script = {"then": {"tool": "add", "arguments": {"x": 1, "y": 1}}}
    sample = only_sample(run(scripted_model(script, name="capped"), tmp_path, cost_limit=0.005))
    assert sample.limit is not None and sample.limit.type == "cost"
    assert len(model_events(sample)) == 3


def test_error_step_fails_the_call(tmp_path: Path) -> None:
    log = run(scripted_model([{"error": "provider exploded"}]), tmp_path, fail_on_error=False)
    sample = only_sample(log)
    assert sample.error is not None
    assert "ScriptError" in sample.error.message
    assert "provider exploded" in sample.error.message
    [event] = model_events(sample)
    assert event.error is not None and "provider exploded" in event.error


def test_running_out_of_steps_names_member_sample_and_count(tmp_path: Path) -> None:
    log = run(scripted_model(["thinking"]), tmp_path, fail_on_error=False)
    error = only_sample(log).error
    assert error is not None
    assert "Member 'main' in sample 'q' (epoch 1) ran out of the 1 steps" in error.message


def test_member_without_pattern_is_an_error(tmp_path: Path) -> None:
    model = scripted_model({"members": {"alice": [{"submit": "3"}]}})
    error = only_sample(run(model, tmp_path, fail_on_error=False)).error
    assert error is not None
    assert "no steps for member 'main' in sample 'q'" in error.message


def test_then_repeats_after_the_steps(tmp_path: Path) -> None:
    script = {
        "members": {"*": [{"tool": "add", "arguments": {"x": 1, "y": 2}}]},
        "then": {"submit": "3"},
    }
    sample = only_sample(run(scripted_model(script), tmp_path))
    assert sample.output.completion == "3"


def test_per_sample_scripts_override_members(tmp_path: Path) -> None:
    script = {
        "members": {"*": [{"submit": "default"}]},
        "samples": {2: {"main": [{"submit": "two"}]}},
    }
    samples = [Sample(id=1, input="one"), Sample(id=2, input="two")]
    log = run(scripted_model(script), tmp_path, samples=samples)
    assert log.samples is not None
    answers = {s.id: s.output.completion for s in log.samples}
    assert answers == {1: "default", 2: "two"}


def test_each_epoch_starts_at_the_first_step(tmp_path: Path) -> None:
    log = run(scripted_model([{"submit": "3"}]), tmp_path, epochs=3)
    assert log.samples is not None
    assert [s.output.completion for s in log.samples] == ["3", "3", "3"]


def test_each_model_has_its_own_counters(tmp_path: Path) -> None:
    script = [{"submit": "3"}]
    first, second = scripted_model(script), scripted_model(script)
    assert only_sample(run(first, tmp_path)).output.completion == "3"
    assert only_sample(run(second, tmp_path)).output.completion == "3"


# asyncio only: outside an eval, inspect keeps its connection semaphores across event loops
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_calls_outside_an_eval_route_as_main(anyio_backend: str) -> None:
    model = scripted_model({"members": {"main": ["one", "two"]}})
    assert (await model.generate("hi")).completion == "one"
    assert (await model.generate("hi")).completion == "two"
    with pytest.raises(ScriptError, match="outside any sample ran out of the 2 steps"):
        await model.generate("hi")


def test_count_tokens_needs_no_network() -> None:
    model = scripted_model(["x"])
    assert anyio.run(model.count_tokens, "abcdefgh") == 2


# per-member routing: two members run at once, as the swarm runtime runs them


def as_member(name: str, delegate: Agent) -> Agent:
    async def execute(state: AgentState) -> AgentState:
        token = _member.set(name)
        try:
            return await delegate(state)
        finally:
            _member.reset(token)

    return execute


@agent
def two_members() -> Agent:
    async def execute(state: AgentState) -> AgentState:
        results: dict[str, AgentState] = {}

        async def run_member(name: str) -> None:
            member = as_member(name, react(name=name, tools=[add()]))
            results[name] = await member(AgentState(messages=list(state.messages)))

        async with anyio.create_task_group() as tg:
            for name in ("alice", "bob"):
                tg.start_soon(run_member, name)
        answers = "|".join(results[name].output.completion for name in ("alice", "bob"))
        state.output = ModelOutput.from_content("two_members", answers)
        return state

    return execute


ROUTED = {
    "members": {
        "alice": [{"tool": "add", "arguments": {"x": 1, "y": 1}, "delay": 0.3}, {"submit": "A"}],
        "b*": [{"text": "bob thinks"}, {"submit": "B"}],
        "*": [{"error": "only alice and bob are scripted"}],
    }
}


def member_of(event: ModelEvent) -> str:
    assert event.call is not None
    return str(event.call.request["member"])


@pytest.mark.anyio
async def test_members_follow_their_own_steps(
    anyio_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    task = Task(dataset=[Sample(id="s", input="go")], solver=two_members())
    [log] = await eval_async(task, model=scripted_model(ROUTED), log_dir=str(tmp_path), epochs=2)
    assert log.status == "success", log.error
    assert log.samples is not None
    for sample in log.samples:
        assert sample.output.completion == "A|B"
        events = model_events(sample)
        by_member = {
            name: [e.call.request["step"] for e in events if member_of(e) == name if e.call]
            for name in ("alice", "bob")
        }
        assert by_member == {"alice": [1, 2], "bob": [1, 2]}
        [delayed] = [
            e
            for e in events
            if member_of(e) == "alice"
            and e.output.message.tool_calls
            and e.output.message.tool_calls[0].function == "add"
        ]
        # the delay is awaited (a lower bound only: the call takes at least the delay)
        assert delayed.working_time is not None and delayed.working_time >= 0.3


def swarm_of(*names: str) -> Agent:
    return swarm(
        [member(react, name=n) for n in names],
        controller=leaderless(stop_on_submission=False),
        channels=[],
    )


def calls_by_step(sample: EvalSample) -> dict[tuple[str, int], ModelEvent]:
    return {
        (e.call.request["member"], e.call.request["step"]): e
        for e in model_events(sample)
        if e.call is not None
    }


def member_end(sample: EvalSample, name: str) -> datetime:
    """When the swarm recorded how member `name` ended."""
    return next(
        e.timestamp
        for e in sample.events
        if isinstance(e, InfoEvent)
        and isinstance(e.data, dict)
        and (e.data.get("kind"), e.data.get("member")) == ("member_result", name)
    )


def test_a_step_held_until_the_stop_ends_stopped_whatever_the_timing(
    backend: str, tmp_path: Path
) -> None:
    # timing alone would make `held` answer first; its hold makes `late` the first
    script = {
        "members": {
            "late": [{"submit": "3", "delay": 0.3}],
            "held": [{"text": "thinking", "after": "stop"}, {"submit": "4"}],
        }
    }
    solver = swarm([member(react, name="late"), member(react, name="held")], channels=[])
    sample = only_sample(run(scripted_model(script), tmp_path, solver=solver))
    result = sample.store["inspect_swarm:result"]
    assert {m["name"]: m["status"] for m in result["members"]} == {
        "late": "submitted",
        "held": "stopped",
    }
    assert sample.output.completion == "3"


def test_a_step_held_until_another_members_call(backend: str, tmp_path: Path) -> None:
    script = {
        "members": {
            "first": [{"tool": "add", "arguments": {"x": 1, "y": 1}, "delay": 0.2}, "b", "c"],
            "second": [{"submit": "3", "after": {"first": 2}}],
        }
    }
    sample = only_sample(run(scripted_model(script), tmp_path, solver=swarm_of("first", "second")))
    calls = calls_by_step(sample)
    # the held call returned only once first had asked again, so its first step's tool ran
    assert calls[("second", 1)].completed is not None
    assert calls[("second", 1)].completed >= calls[("first", 2)].timestamp


def test_a_step_after_a_call_its_member_never_makes_goes_on_once_it_ended(
    backend: str, tmp_path: Path
) -> None:
    # first ends after one call, so its third never comes: second goes on at its end
    script = {
        "members": {
            "first": [{"submit": "1"}],
            "second": [{"submit": "2", "after": {"first": 3}}],
        }
    }
    solver = swarm_of("first", "second")
    # the time limit only keeps a hold that never ends from hanging the test
    sample = only_sample(run(scripted_model(script), tmp_path, solver=solver, time_limit=120))
    statuses = {m["name"]: m["status"] for m in sample.store["inspect_swarm:result"]["members"]}
    assert statuses == {"first": "submitted", "second": "submitted"}
    held = calls_by_step(sample)[("second", 1)]
    assert held.completed is not None and held.completed >= member_end(sample, "first")


def test_a_step_held_for_the_stop_and_a_call_waits_for_both(backend: str, tmp_path: Path) -> None:
    # late's answer stops the swarm; first's call returns in the grace and its next is refused,
    # so first ends stopped; second, held for the stop and first's second call, goes on only
    # once first has ended, well after the stop released it
    script = {
        "members": {
            "late": [{"submit": "3"}],
            "first": [{"text": "a", "after": "stop"}, {"submit": "1"}],
            "second": [{"text": "b", "after": ["stop", {"first": 2}]}, {"submit": "2"}],
        }
    }
    solver = swarm([member(react, name=n) for n in ("late", "first", "second")], channels=[])
    sample = only_sample(run(scripted_model(script), tmp_path, solver=solver, time_limit=120))
    statuses = {m["name"]: m["status"] for m in sample.store["inspect_swarm:result"]["members"]}
    assert statuses == {"late": "submitted", "first": "stopped", "second": "stopped"}
    held = calls_by_step(sample)[("second", 1)]
    assert held.completed is not None and held.completed >= member_end(sample, "first")


def test_a_step_held_for_the_stop_goes_on_while_the_others_wait_for_their_turn(
    backend: str, tmp_path: Path
) -> None:
    # under rounds(), quick answers round 1 and waits for its next turn, which the controller
    # gives only once held has answered too: no stop can come, so held goes on
    script = {
        "members": {
            "quick": [{"submit": "1"}, {"submit": "2"}],
            "held": [{"text": "thinking", "after": "stop"}, {"submit": "2"}, {"submit": "2"}],
        }
    }
    solver = swarm(
        [member(react, name="quick"), member(react, name="held")],
        controller=rounds(2),
        channels=[],
    )
    # the time limit only keeps a hold that never ends from hanging the test
    sample = only_sample(run(scripted_model(script), tmp_path, solver=solver, time_limit=120))
    statuses = {m["name"]: m["status"] for m in sample.store["inspect_swarm:result"]["members"]}
    assert statuses == {"quick": "submitted", "held": "submitted"}
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "controller:rounds_done"
    assert sample.output.completion == "2"


def test_calls_held_for_a_stop_that_cannot_come_all_go_on(backend: str, tmp_path: Path) -> None:
    # a vote waits for both, so no stop can come: both go on, and each next call waits for the
    # other's, which comes only if the one that went first still lets the other go
    script = {
        "members": {
            "a": [
                {"text": "x", "after": "stop"},
                {"text": "y", "after": {"b": 2}},
                {"submit": "2"},
            ],
            "b": [
                {"text": "x", "after": "stop"},
                {"text": "y", "after": {"a": 2}},
                {"submit": "2"},
            ],
        }
    }
    solver = swarm(
        [member(react, name="a"), member(react, name="b")], controller=vote(), channels=[]
    )
    # the time limit only keeps a hold that never ends from hanging the test
    sample = only_sample(run(scripted_model(script), tmp_path, solver=solver, time_limit=120))
    statuses = {m["name"]: m["status"] for m in sample.store["inspect_swarm:result"]["members"]}
    assert statuses == {"a": "submitted", "b": "submitted"}
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "all_done"


@pytest.mark.parametrize("after", ["stop", {"w-1": 2}])
def test_a_held_step_outside_a_swarm_says_so(after: Any, tmp_path: Path) -> None:
    log = run(scripted_model([{"text": "x", "after": after}]), tmp_path)
    assert log.status == "error" and log.error is not None
    assert "outside every swarm: remove `after`" in log.error.message
