from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from os import PathLike
from pathlib import Path
from typing import Any, Literal, TypeAlias

import yaml
from inspect_ai.model import StopReason
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

MAIN = "main"
"""The name a caller outside every swarm member is routed by."""

LOOP_SEPARATOR = "/"
"""Joins a member's name and the name of its nested loop in a route (`deep/general`)."""

_CONFIG = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class ScriptUsage(BaseModel):
    """Token usage reported for each call (fixed, so budgets are exact)."""

    model_config = _CONFIG

    input_tokens: NonNegativeInt = 100
    """Input tokens of each call."""

    output_tokens: NonNegativeInt = 10
    """Output tokens of each call."""


class ScriptPrice(BaseModel):
    """Price of the scripted model in dollars per million tokens."""

    model_config = _CONFIG

    input: NonNegativeFloat = 10.0
    """Dollars per million input tokens (also used for cache reads and writes)."""

    output: NonNegativeFloat = 100.0
    """Dollars per million output tokens."""


class StepUsage(BaseModel):
    """Usage of one step; a field left out comes from the script's `usage`."""

    model_config = _CONFIG

    input_tokens: NonNegativeInt | None = None
    """Input tokens of the call."""

    output_tokens: NonNegativeInt | None = None
    """Output tokens of the call."""


class StepCall(BaseModel):
    """One of the tool calls of a step that makes several (`calls`)."""

    model_config = _CONFIG

    tool: str
    """The tool to call."""

    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    """Its arguments."""


STOP: Literal["stop"] = "stop"
"""The value of `after` that holds a call until the swarm's stop."""

After: TypeAlias = Literal["stop"] | dict[str, PositiveInt]
"""One thing a step waits for: the swarm's stop (`stop`), or calls of other members (each
member's name and the number of its call, `{w-1: 2}`)."""


@dataclass(frozen=True)
class Hold:
    """What a step's `after` holds its call for, as one value."""

    stop: bool = False
    """Until the swarm's stop has begun (or no stop can come)."""

    calls: Mapping[str, int] = field(default_factory=dict)
    """Until each member named has begun its call of that number, or will begin no more."""

    @classmethod
    def of(cls, after: After | list[After] | None) -> Hold:
        waits = _listed(after)
        calls = {name: n for wait in waits if isinstance(wait, dict) for name, n in wait.items()}
        return cls(stop=STOP in waits, calls=calls)

    def after(self) -> After | list[After] | None:
        """The `after` that says this hold."""
        waits: list[After] = [STOP] if self.stop else []
        if self.calls:
            waits.append(dict(self.calls))
        return waits[0] if len(waits) == 1 else waits or None


def _listed(after: After | list[After] | None) -> list[After]:
    return after if isinstance(after, list) else [] if after is None else [after]


class Step(BaseModel):
    """What one model call returns.

    A plain string is shorthand for `{text: ...}`.
    """

    model_config = _CONFIG

    text: str | None = None
    """Text of the assistant message."""

    submit: str | None = None
    """Call the `submit` tool with `{"answer": submit}`."""

    tool: str | None = None
    """Call this tool (with `arguments`)."""

    arguments: dict[str, JsonValue] | None = None
    """Arguments of the `tool` call."""

    calls: list[StepCall] | None = None
    """Several tool calls in one message, in order (instead of `submit` or `tool`)."""

    stop_reason: StopReason | None = None
    """Stop reason (default `tool_calls` for a tool call, else `stop`)."""

    error: str | None = None
    """Raise `ScriptError` with this message instead of returning."""

    delay: NonNegativeFloat = 0.0
    """Seconds to wait before the call returns (or raises)."""

    after: After | list[After] | None = None
    """Hold the call until this has happened, then return (after `delay`): `stop`, the
    swarm's stop has begun (or no stop can come); `{w-1: 2}`, member `w-1` has begun its
    second call (so the tools of its first have run), or will begin no more (it ended, or its
    agent returned right after its first call); a list, each of them. The order of members'
    steps then depends on no timing."""

    hang: bool = False
    """Never return: the call waits until it is cancelled."""

    refused: bool = False
    """The swarm refuses this call of a member: it waits until the swarm does (once it has
    stopped the member) and never reaches the model."""

    usage: StepUsage | None = None
    """Usage of this call (default: the script's `usage`)."""

    @model_validator(mode="before")
    @classmethod
    def _text_shorthand(cls, data: Any) -> Any:
        return {"text": data} if isinstance(data, str) else data

    @field_validator("after")
    @classmethod
    def _check_after(cls, after: After | list[After] | None) -> After | list[After] | None:
        waits = _listed(after)
        if after == [] or {} in waits:
            raise ValueError(
                "`after` names nothing to wait for: give `stop`, members and their calls "
                "({w-1: 2}), or a list of both, or remove it"
            )
        if len({isinstance(wait, dict) for wait in waits}) < len(waits):
            raise ValueError(
                f"`after` lists {waits!r}: name `stop` once and every member in one mapping "
                "(after: [stop, {w-1: 2, w-2: 3}])"
            )
        return after

    @model_validator(mode="after")
    def _check_fields(self) -> Step:
        given = [
            f"{name}={value!r}" if isinstance(value, str) else name
            for name, value in (("submit", self.submit), ("tool", self.tool), ("calls", self.calls))
            if value is not None
        ]
        if len(given) > 1:
            raise ValueError(
                f"a step gives its tool calls once, but this one has {' and '.join(given)}: "
                "keep one of them (`calls` for several)"
            )
        if self.arguments is not None and self.tool is None:
            raise ValueError("`arguments` needs `tool`: add `tool: <name>` to the step")
        if self.calls == []:
            raise ValueError("`calls` is empty: list one tool call or more, or remove it")
        if self.error is not None and (self._returns() or self.hang or self.refused):
            raise ValueError(
                f"error={self.error!r} makes the call raise, so the step cannot also return "
                "`text`, `submit`, `tool`, `calls` or `stop_reason`, or hang: remove them or "
                "the error"
            )
        waits = [name for name in ("hang", "refused") if getattr(self, name)]
        if waits and (self._returns() or len(waits) > 1):
            raise ValueError(
                f"{waits[0]}=true makes the call wait and never return, so the step cannot "
                "also return `text`, `submit`, `tool`, `calls` or `stop_reason`, or have both "
                "`hang` and `refused`: keep one of them"
            )
        if self.error is None and not waits and not self._returns():
            raise ValueError(
                "an empty step: give `text`, `submit`, `tool`, `calls`, `stop_reason`, "
                "`error`, `hang` or `refused`"
            )
        return self

    def _returns(self) -> bool:
        returned = (self.text, self.submit, self.tool, self.calls, self.stop_reason)
        return any(value is not None for value in returned)


Steps: TypeAlias = list[Step]


class Script(BaseModel):
    """The scripted model's script: the steps of each member, in order.

    A list of steps is shorthand for `{members: {"*": [...]}}`.
    """

    model_config = _CONFIG

    members: dict[str, Steps] = Field(default_factory=dict)
    """Steps by member name pattern (fnmatch), or by `member/loop` pattern for the calls of a
    member's nested loops; an exact name wins over patterns."""

    samples: dict[str, dict[str, Steps]] = Field(default_factory=dict)
    """Steps by sample id, then member pattern; tried before `members`."""

    then: Step | None = None
    """Step repeated once a member's steps run out (otherwise running out raises)."""

    usage: ScriptUsage = ScriptUsage()
    """Usage reported by each call."""

    price: ScriptPrice | None = ScriptPrice()
    """Price of the model (`None` for an unpriced model)."""

    @model_validator(mode="before")
    @classmethod
    def _steps_shorthand(cls, data: Any) -> Any:
        if isinstance(data, Sequence) and not isinstance(data, str | bytes):
            return {"members": {"*": data}}
        return data

    @field_validator("samples", mode="before")
    @classmethod
    def _sample_ids_as_text(cls, value: Any) -> Any:
        # YAML reads `1:` as an int, while sample ids are matched as text
        if isinstance(value, Mapping):
            return {str(key): steps for key, steps in value.items()}
        return value

    def steps_for(self, name: str, sample_id: str | None) -> Steps | None:
        """The steps of a member, or of a member's nested loop (`member/loop`), in a sample.

        The sample's own table is searched before `members`, and in each an exact name before
        the patterns. A pattern with a `/` matches only loop names, and one without only
        member names.

        Args:
            name: The member's name, or `member/loop` for one of its nested loops.
            sample_id: The sample's id, or `None` to search `members` only.

        Returns:
            The steps, or `None` when no name or pattern matches.
        """
        tables = [self.members]
        if sample_id is not None and sample_id in self.samples:
            tables.insert(0, self.samples[sample_id])
        nested = LOOP_SEPARATOR in name
        for table in tables:
            if name in table:
                return table[name]
            for pattern, steps in table.items():
                if (LOOP_SEPARATOR in pattern) == nested and fnmatchcase(name, pattern):
                    return steps
        return None

    def to_yaml(self) -> str:
        """The script as YAML, without the fields left at their defaults: what `-M script=`
        reads back as the same script."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)

    def routes_loops(self) -> bool:
        """Whether any pattern routes the calls of members' nested loops (`member/loop`)."""
        tables = [self.members, *self.samples.values()]
        return any(LOOP_SEPARATOR in pattern for table in tables for pattern in table)


ScriptSource: TypeAlias = Script | Mapping[str, Any] | Sequence[Any] | str | PathLike[str]
"""A script, its mapping (or list of steps), or the path of a YAML or JSON file."""


def load_script(source: ScriptSource) -> Script:
    """Read and check a script; raise ValueError naming the problem and the fix."""
    if isinstance(source, Script):
        return source
    if isinstance(source, str | PathLike):
        return _load_file(Path(source))
    try:
        return Script.model_validate(source)
    except ValidationError as ex:
        raise ValueError(f"The scripted model's `script` is not valid: {ex}") from None


def _load_file(path: Path) -> Script:
    if not path.is_file():
        raise FileNotFoundError(
            f"The scripted model's `script` file {str(path)!r} does not exist: pass the path "
            "of a YAML or JSON script (relative paths start at the working directory)."
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Script.model_validate(data)
    except (yaml.YAMLError, ValidationError) as ex:
        raise ValueError(
            f"The scripted model's `script` file {str(path)!r} is not valid: {ex}"
        ) from None
