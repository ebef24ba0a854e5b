"""`member_scores()`: the swarm's answer scored as the task scores it, and each member's own
submission scored as if that member had answered alone."""

import math
import statistics
from copy import copy
from typing import Any

import anyio
from inspect_ai.event import InfoEvent
from inspect_ai.log import transcript
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage
from inspect_ai.model._model import sample_model_usage_context_var
from inspect_ai.scorer import (
    Score,
    Scorer,
    Target,
    ValueToFloat,
    mean,
    scorer,
    stderr,
    value_to_float,
)
from inspect_ai.solver import TaskState

from ._contracts._schema import EVIDENCE_SOURCE, RESULT_KEY
from ._runtime._sandbox import scoring_sandbox


@scorer(metrics={"*": [mean(), stderr()]}, name="member_scores")
def member_scores(scorer: Scorer, to_float: ValueToFloat | None = None) -> Scorer:
    """Score the swarm's answer, and each member's own submission as if it had answered alone.

    The swarm's answer is scored with `scorer` just as the task would score it. Then each
    member that submitted is scored with the same `scorer`, on a copy of the task state whose
    output and last message are that member's own. A scorer that reads a sandbox sees the
    member's own sandbox when members have their own (and no other member's); with a shared
    sandbox it sees what all members left there. Members that did not submit are not scored.

    The score's value holds:

    - `answer`: the swarm's answer's score.
    - `team`: the best member's score, counting a member that did not submit as 0 (team@k for
      a pass/fail scorer).
    - `mean_member`: the mean over the members that submitted (NaN, which metrics skip, when
      none did).
    - `mean_member_all`: the mean over all members, counting a member that did not submit
      as 0.

    Each is a float from `to_float` (Inspect's `value_to_float()` by default), and each is
    aggregated by `mean` and `stderr`; epochs reduce each key as they reduce any score, so
    `Epochs(k, "max")` of `answer` is the swarm's best@k. The metadata has each member's
    value (`members`, `None` for one that did not submit) and what scoring the members cost
    (`member_scoring`: tokens, dollars and usage per model), which is apart from what the
    swarm spent.

    Scoring members calls the scorer once more for each member that submitted but the
    answer's own (its score is the answer's): with a model-graded scorer, that is one grader
    call per member.

    Args:
        scorer: The scorer to apply, such as the task's own (`match()`,
            `model_graded_qa()`...). It must return one score with a single value.
        to_float: How to turn the scorer's values into floats (default `value_to_float()`).
    """
    convert = to_float or value_to_float()

    async def score(state: TaskState, target: Target) -> Score:
        result = state.store.get(RESULT_KEY)
        if result is None:
            raise ValueError(
                f"member_scores(): sample {state.sample_id!r} has no swarm result record "
                f"({RESULT_KEY!r}); use member_scores() on a task whose solver is swarm()."
            )
        answer = _one(await scorer(state, target), scorer)
        answer_value = convert(answer.value)
        before = _usage_now()
        values = await _score_members(state, target, scorer, convert, result, answer_value)
        spent = _usage_since(before)
        scored = [v for v in values.values() if v is not None]
        all_values = [0.0 if v is None else v for v in values.values()]
        return Score(
            value={
                "answer": answer_value,
                "team": max(all_values, default=0.0),
                "mean_member": statistics.fmean(scored) if scored else math.nan,
                "mean_member_all": statistics.fmean(all_values) if all_values else math.nan,
            },
            answer=answer.answer,
            explanation=answer.explanation,
            metadata={"members": values, "member_scoring": spent},
        )

    return score


async def _score_members(
    state: TaskState,
    target: Target,
    scorer: Scorer,
    convert: ValueToFloat,
    result: dict[str, Any],
    answer_value: float,
) -> dict[str, float | None]:
    """Each member's own score, in roster order (`None` for one that did not submit)."""
    submissions = _submissions()
    own = {m["sandbox"] for m in result["members"] if m["sandbox"] is not None}
    final = result["final"]
    values: dict[str, float | None] = {m["name"]: None for m in result["members"]}
    input_messages = _input(state.messages)

    async def one(entry: dict[str, Any]) -> None:
        output = ModelOutput.model_validate(submissions[entry["name"]])
        answered = entry["name"] == final["member"] and output.completion == state.output.completion
        if answered and entry["sandbox"] is None:
            # the answer is this member's submission, scored where the member worked
            values[entry["name"]] = answer_value
            return
        alone = copy(state)
        alone.output = output
        alone.messages = [*input_messages, *([output.message] if output.choices else [])]
        with scoring_sandbox(entry["sandbox"], own):
            values[entry["name"]] = convert(_one(await scorer(alone, target), scorer).value)

    async with anyio.create_task_group() as tg:
        for entry in result["members"]:
            if entry["submitted"] and entry["name"] in submissions:
                tg.start_soon(one, entry)
    return values


def _submissions() -> dict[str, Any]:
    """The outputs of the members that submitted, from the swarm's last `submissions` event (the
    transcript holds the sample's events also when `inspect score` rescores a log)."""
    for event in reversed(transcript().events):
        if isinstance(event, InfoEvent) and event.source == EVIDENCE_SOURCE:
            data = event.data
            if isinstance(data, dict) and data.get("type") == "submissions":
                outputs = data["outputs"]
                return dict(outputs) if isinstance(outputs, dict) else {}
    return {}


def _input(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The sample's messages without the swarm's answer message."""
    if messages and EVIDENCE_SOURCE in (messages[-1].metadata or {}):
        return messages[:-1]
    return list(messages)


def _one(score: Score | list[Score] | None, scorer: Scorer) -> Score:
    if not isinstance(score, Score) or isinstance(score.value, dict | list):
        raise ValueError(
            f"member_scores(): the scorer {scorer!r} returned {score!r}; member_scores() needs a "
            "scorer that returns one Score with a single value (a number, a bool or a string "
            "such as 'C'). Wrap each part of a multi-part scorer on its own."
        )
    return score


def _usage_now() -> dict[str, ModelUsage] | None:
    usage = sample_model_usage_context_var.get(None)
    return None if usage is None else {model: u.model_copy() for model, u in usage.items()}


def _usage_since(before: dict[str, ModelUsage] | None) -> dict[str, Any] | None:
    """What the sample's models used since `before`: tokens, dollars and usage per model
    (`None` outside a running sample, such as when `inspect score` rescored a log)."""
    after = sample_model_usage_context_var.get(None)
    if before is None or after is None:
        return None
    models: dict[str, Any] = {}
    for model, now in after.items():
        then = before.get(model, ModelUsage())
        tokens = now.total_tokens - then.total_tokens
        if tokens or (now.total_cost or 0.0) != (then.total_cost or 0.0):
            cost = None if now.total_cost is None else now.total_cost - (then.total_cost or 0.0)
            models[model] = {
                "input_tokens": now.input_tokens - then.input_tokens,
                "output_tokens": now.output_tokens - then.output_tokens,
                "total_tokens": tokens,
                "total_cost": cost,
            }
    costs = [m["total_cost"] for m in models.values()]
    return {
        "tokens": sum(m["total_tokens"] for m in models.values()),
        "cost": None if None in costs else sum(c for c in costs if c is not None),
        "models": models,
    }
