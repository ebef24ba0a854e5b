from __future__ import annotations

from collections.abc import Mapping, Sequence
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


class AfterStep(BaseModel):
    """A call of another member of the same sample and epoch, which a held step waits for."""

    model_config = _CONFIG

    member: str
    """The member's name (its own steps, not a nested loop's)."""

    step: PositiveInt
    """The number of the member's call: once that call has reached the model, the member's
    earlier steps are done (their tools have run)."""


After: TypeAlias = Literal["stop"] | AfterStep
"""What a step waits for before it returns: the swarm's stop, or another member's call."""


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

    stop_reason: StopReason | None = None
    """Stop reason (default `tool_calls` for a tool call, else `stop`)."""

    error: str | None = None
    """Raise `ScriptError` with this message instead of returning."""

    delay: NonNegativeFloat = 0.0
    """Seconds to wait before the call returns (or raises)."""

    after: After | None = None
    """Hold the call until this has happened, then return (after `delay`): `"stop"`, the
    swarm's stop has begun (or no stop can come); `{member: w-1, step: 2}`, that member's second call has reached
    the model. The order of members' steps then depends on no timing."""

    usage: StepUsage | None = None
    """Usage of this call (default: the script's `usage`)."""

    @model_validator(mode="before")
    @classmethod
    def _text_shorthand(cls, data: Any) -> Any:
        return {"text": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _check_fields(self) -> Step:
        if self.submit is not None and self.tool is not None:
            raise ValueError(
                f"a step makes one tool call, but this one has submit={self.submit!r} and "
                f"tool={self.tool!r}: keep one of them"
            )
        if self.arguments is not None and self.tool is None:
            raise ValueError("`arguments` needs `tool`: add `tool: <name>` to the step")
        if self.error is not None and self._returns():
            raise ValueError(
                f"error={self.error!r} makes the call raise, so the step cannot also return "
                "`text`, `submit`, `tool` or `stop_reason`: remove them or the error"
            )
        if self.error is None and not self._returns():
            raise ValueError(
                "an empty step: give `text`, `submit`, `tool`, `stop_reason` or `error`"
            )
        return self

    def _returns(self) -> bool:
        return any(
            value is not None for value in (self.text, self.submit, self.tool, self.stop_reason)
        )


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
