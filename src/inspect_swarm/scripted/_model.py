from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from types import EllipsisType
from typing import Any, TypeAlias
from weakref import WeakKeyDictionary

import anyio
from inspect_ai.event import Event, SpanBeginEvent
from inspect_ai.log import transcript
from inspect_ai.log._samples import ActiveSample, sample_active
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    GenerateConfig,
    Model,
    ModelAPI,
    ModelCall,
    ModelCost,
    ModelInfo,
    ModelOutput,
    ModelUsage,
    get_model,
    modelapi,
    set_model_info,
)
from inspect_ai.tool import ToolCall, ToolChoice, ToolInfo
from inspect_ai.util._span import current_agent_span_id

from .._context import current_member, current_swarm
from ._script import (
    LOOP_SEPARATOR,
    MAIN,
    After,
    ScriptPrice,
    ScriptSource,
    ScriptUsage,
    Step,
    StepUsage,
    load_script,
)

API_NAME = "scripted"

_Counter: TypeAlias = tuple[str, str | None]
"""A step counter: the route (a member, or `member/loop`) and the run of the loop (span id)."""

# inspect's default (10) would queue members behind each other and stretch scripted delays
_MAX_CONNECTIONS = 100_000

_CONTEXT_LENGTH = 1_000_000


class ScriptError(RuntimeError):
    """A scripted call failed: an `error` step, or the script has no step for the call."""


@modelapi(name=API_NAME)
class ScriptedModelAPI(ModelAPI):
    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig | None = None,
        script: ScriptSource | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config or GenerateConfig())
        if model_args:
            raise ValueError(
                f"The scripted model takes only the model arg `script`, not "
                f"{sorted(model_args)}: pass the script with -M script=<file.yaml>."
            )
        if script is None:
            raise ValueError(
                f"The scripted model {API_NAME}/{model_name} needs a script: pass "
                "-M script=<file.yaml> or use scripted_model(script)."
            )
        self.script = load_script(script)
        # step counters per active sample (so per epoch) and route: a member, or one run (span
        # id) of a member's nested loop; outside every sample, one set of counters for the model
        self._counters: WeakKeyDictionary[ActiveSample, dict[_Counter, int]] = WeakKeyDictionary()
        self._unbound_counters: dict[_Counter, int] = {}
        # per active sample, what calls held until a member's step wait on
        self._stepped: WeakKeyDictionary[ActiveSample, anyio.Event] = WeakKeyDictionary()
        # nested loops are looked up only for a script that routes them
        self._routes_loops = self.script.routes_loops()
        self._loop_names: dict[str, str | None] = {}
        _register_price(f"{API_NAME}/{model_name}", self.script.price)

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> tuple[ModelOutput, ModelCall]:
        active = sample_active()
        member = current_member() or MAIN
        sample_id = None if active is None else str(active.sample.id)
        counter = self._route(member, sample_id)
        number, step = self._next_step(active, counter, sample_id)
        if step.after is not None:
            await self._hold(step.after, active)
        if step.delay > 0:
            await anyio.sleep(step.delay)
        if step.error is not None:
            raise ScriptError(step.error)
        request = {
            "member": member,
            "route": counter[0],
            "sample": None if active is None else active.sample.id,
            "epoch": None if active is None else active.epoch,
            "step": number,
            "messages": len(input),
        }
        response = step.model_dump(exclude_defaults=True)
        return self._output(step), ModelCall.create(request, response)

    async def count_text_tokens(self, text: str) -> int:
        # a fixed heuristic instead of tiktoken, whose vocabulary is downloaded on first use
        return math.ceil(len(text) / 4)

    def max_connections(self) -> int:
        return _MAX_CONNECTIONS

    def _route(self, member: str, sample_id: str | None) -> _Counter:
        """The counter of a call: its member's, or, when the script routes the member's nested
        loop that makes it (`member/loop`), that run of the loop's."""
        if not self._routes_loops or member == MAIN:
            return member, None
        loop = current_agent_span_id()
        swarm = current_swarm()
        if loop is None or swarm is None or loop == swarm.member_span_id(member):
            return member, None
        name = self._loop_name(loop)
        if name is None:
            return member, None
        route = f"{member}{LOOP_SEPARATOR}{name}"
        if self.script.steps_for(route, sample_id) is None:
            return member, None
        return route, loop

    def _loop_name(self, span_id: str) -> str | None:
        """The name of the agent span `span_id`, found once in the transcript."""
        if span_id not in self._loop_names:
            history = transcript().history
            found = _span_name(reversed(history.resident_events), span_id)
            if found is None and history.resident_events_truncated:
                found = _span_name(transcript().events, span_id)
            self._loop_names[span_id] = found
        return self._loop_names[span_id]

    def _next_step(
        self, active: ActiveSample | None, counter: _Counter, sample_id: str | None
    ) -> tuple[int, Step]:
        counters = (
            self._unbound_counters if active is None else self._counters.setdefault(active, {})
        )
        number = counters.get(counter, 0) + 1
        counters[counter] = number
        # calls held until a member's step look again
        stepped = None if active is None else self._stepped.pop(active, None)
        if stepped is not None:
            stepped.set()
        name = counter[0]
        steps = self.script.steps_for(name, sample_id)
        if steps is not None and number <= len(steps):
            return number, steps[number - 1]
        if self.script.then is not None:
            return number, self.script.then
        raise ScriptError(self._no_step_message(name, active, steps))

    async def _hold(self, after: After, active: ActiveSample | None) -> None:
        """Hold a call until what `after` names has happened in its sample."""
        swarm = current_swarm()
        if active is None or swarm is None:
            raise ScriptError(
                f"The script of {API_NAME}/{self.model_name} holds a step (`after: {after}`), "
                "but the call is outside every swarm: remove `after` from the step."
            )
        if after == "stop":
            await swarm.stop_begun(current_member() or MAIN)
            return
        counters = self._counters.setdefault(active, {})
        while counters.get((after.member, None), 0) < after.step:
            stepped = self._stepped.get(active)
            if stepped is None:
                stepped = self._stepped[active] = anyio.Event()
            await stepped.wait()

    def _no_step_message(
        self, name: str, active: ActiveSample | None, steps: list[Step] | None
    ) -> str:
        where = (
            "outside any sample"
            if active is None
            else f"in sample {active.sample.id!r} (epoch {active.epoch})"
        )
        if steps is None:
            return (
                f"The script of {API_NAME}/{self.model_name} has no steps for member "
                f"{name!r} {where}: add a `members` pattern that matches {name!r}, "
                "or a `then:` step."
            )
        who = f"A run of loop {name!r}" if LOOP_SEPARATOR in name else f"Member {name!r}"
        return (
            f"{who} {where} ran out of the {len(steps)} steps the script of "
            f"{API_NAME}/{self.model_name} gives it: add steps, or a `then:` step."
        )

    def _output(self, step: Step) -> ModelOutput:
        tool_calls = _tool_calls(step)
        stop_reason = step.stop_reason or ("tool_calls" if tool_calls else "stop")
        message = ChatMessageAssistant(
            content=step.text or "",
            tool_calls=tool_calls or None,
            model=self.model_name,
            source="generate",
        )
        return ModelOutput(
            model=self.model_name,
            choices=[ChatCompletionChoice(message=message, stop_reason=stop_reason)],
            usage=_usage(self.script.usage, step.usage),
        )


def _span_name(events: Iterable[Event], span_id: str) -> str | None:
    for event in events:
        if isinstance(event, SpanBeginEvent) and event.id == span_id:
            return event.name
    return None


def _tool_calls(step: Step) -> list[ToolCall]:
    arguments: dict[str, Any]
    if step.submit is not None:
        function, arguments = "submit", {"answer": step.submit}
    elif step.tool is not None:
        function, arguments = step.tool, dict(step.arguments or {})
    else:
        return []
    return [ToolCall(id=f"call_{uuid.uuid4().hex}", function=function, arguments=arguments)]


def _usage(default: ScriptUsage, override: StepUsage | None) -> ModelUsage:
    input_tokens, output_tokens = default.input_tokens, default.output_tokens
    if override is not None:
        input_tokens = _first(override.input_tokens, input_tokens)
        output_tokens = _first(override.output_tokens, output_tokens)
    return ModelUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


def _first(value: int | None, default: int) -> int:
    return default if value is None else value


def _register_price(model: str, price: ScriptPrice | None) -> None:
    # also for an unpriced script, so a price registered earlier for the name is dropped
    cost = (
        None
        if price is None
        else ModelCost(
            input=price.input,
            output=price.output,
            input_cache_write=price.input,
            input_cache_read=price.input,
        )
    )
    set_model_info(
        model,
        ModelInfo(organization="inspect_swarm", context_length=_CONTEXT_LENGTH, cost=cost),
    )


def scripted_model(
    script: ScriptSource,
    *,
    name: str = "default",
    usage: ScriptUsage | dict[str, int] | None = None,
    price: ScriptPrice | dict[str, float] | EllipsisType | None = ...,
) -> Model:
    """The scripted model running a script.

    Returns a fresh `Model` for `scripted/<name>` (not memoised, so its step counters
    start at zero). The script is checked here; `usage` and `price` replace the
    script's own.

    Args:
        script: The script, its mapping (or a list of steps for every member), or the
            path of a YAML or JSON file.
        name: Model name: the model is `scripted/<name>`, and its price is
            registered for that name.
        usage: Usage of each call (default: the script's, else 100 input and 10
            output tokens).
        price: Dollars per million tokens; `None` makes the model unpriced (default:
            the script's, else 10 input and 100 output).

    Returns:
        The model, for `eval(model=...)` or the `model` of a member's agent.

    Raises:
        ValueError: The script is not valid (the message names the problem and the fix), or
            `usage` or `price` is not (a pydantic `ValidationError`).
        FileNotFoundError: `script` is a path to no file.
    """
    loaded = load_script(script)
    update: dict[str, Any] = {}
    if usage is not None:
        update["usage"] = ScriptUsage.model_validate(usage)
    if price is not ...:
        update["price"] = None if price is None else ScriptPrice.model_validate(price)
    resolved = loaded.model_copy(update=update)
    return get_model(f"{API_NAME}/{name}", memoize=False, script=resolved.model_dump(mode="json"))
