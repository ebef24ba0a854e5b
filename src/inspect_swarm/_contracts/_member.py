import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from inspect_ai._util.registry import (
    has_registry_params,
    is_registry_object,
    registry_info,
    registry_lookup,
    registry_unqualified_name,
    registry_value,
)
from inspect_ai.agent import Agent
from inspect_ai.model import ChatMessage, ChatMessageBase
from inspect_ai.util import (
    Limit,
    cost_limit,
    message_limit,
    sample_limits,
    time_limit,
    token_limit,
    turn_limit,
)
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer

from ._factory import PACKAGE, NotRegistered, suggest
from ._roster import Delivery, MemberInfo

AgentFactory = Callable[..., Agent]
"""A registered `@agent` factory."""

RESERVED_NAMES = ("init", "solvers", "scorers")
_MESSAGE: TypeAdapter[ChatMessage] = TypeAdapter(ChatMessage)
BRIDGED_NAMESPACE = "inspect_swe/"

ExposureMode = Literal["auto", "manual"]
"""Who observes a member's model inputs for exposure evidence under an activation policy: the
swarm, at each successful model call (`auto`), or the experiment alone, through
`record_exposure()` (`manual`)."""


class Member(BaseModel):
    """One record of a swarm's roster: a built agent, or a registered `@agent` factory with the
    arguments to build one.

    Make records with `member()`: its arguments are these fields, and its docstring says how a
    member runs.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    agent: Any = None
    """A built, registered agent. Exactly one of `agent` and `factory` is set."""

    factory: Any = None
    """A registered `@agent` factory, called with `args` to build the member's agent."""

    args: dict[str, Any] = Field(default_factory=dict)
    """The factory's keyword arguments."""

    name: str | None = None
    """The member's name. `None` uses the agent's or factory's unqualified registry name."""

    role: str | None = None
    """The member's role, given to the controller and in the member's preamble."""

    count: int = 1
    """How many members this record stands for. Above 1 needs the factory form."""

    limits: list[Any] = Field(default_factory=list)
    """The member's own limits."""

    bridged: bool | None = None
    """Whether the member's agent is bridged. `None` counts agents in the `inspect_swe/`
    namespace as bridged."""

    delivery: Delivery | None = None
    """The member's configured delivery mode: `notify` or `poll`. `None` selects `notify`."""

    sandbox: str | None = None
    """The member's own sandbox environment, where `{member}` stands for the member's name.
    `None` shares the sample's sandbox."""

    visible_sandboxes: list[str] = Field(default_factory=list)
    """The sample's other sandbox environments that stay reachable, by name, from a member with
    its own `sandbox`."""

    input: str | list[ChatMessage] | None = None
    """The member's own input, in place of the sample's. `None` gives it the sample's."""

    conversational: bool = False
    """Under an activation policy, a reply without tool calls ends the member's activation,
    not the member."""

    exposure: ExposureMode = "auto"
    """Who observes the member's model inputs for exposure evidence, under a policy."""

    @model_serializer
    def _serialize(self) -> dict[str, Any]:
        # the logged form is the form swarm() accepts (and the CLI's -S), so a log rebuilds
        logged: dict[str, Any] = {}
        if self.factory is not None:
            logged["factory"] = registry_info(self.factory).name
            if self.args:
                logged["args"] = registry_value(self.args)
        else:
            logged["agent"] = registry_value(self.agent)
        for field in ("name", "role", "bridged", "delivery", "sandbox"):
            value = getattr(self, field)
            if value is not None:
                logged[field] = value
        if self.count != 1:
            logged["count"] = self.count
        if self.limits:
            logged["limits"] = [_limit_dict(limit) for limit in self.limits]
        if self.visible_sandboxes:
            logged["visible_sandboxes"] = list(self.visible_sandboxes)
        if self.input is not None:
            logged["input"] = (
                self.input
                if isinstance(self.input, str)
                else [m.model_dump(mode="json") for m in self.input]
            )
        if self.conversational:
            logged["conversational"] = True
        if self.exposure != "auto":
            logged["exposure"] = self.exposure
        return logged


def member(
    agent: Agent | AgentFactory,
    args: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    role: str | None = None,
    count: int = 1,
    limits: Sequence[Limit] | None = None,
    bridged: bool | None = None,
    delivery: Literal["notify", "poll"] | None = None,
    sandbox: str | None = None,
    visible_sandboxes: Sequence[str] = (),
    input: str | Sequence[ChatMessage] | None = None,
    conversational: bool = False,
    exposure: ExposureMode = "auto",
) -> Member:
    """A swarm member, with a name, role, limits or count.

    The agent comes built, as in `member(react(prompt=...))`, or as a registered `@agent`
    factory with the keyword arguments to call it with, as in
    `member(deepagent, args={"tools": [bash()]}, count=4)`. Either way the agent is
    registered with `@agent`, so the log can name it and a replay can find it again. A built
    agent may also go straight into `swarm(members=...)`, without `member()`.

    In a sample, one agent object never runs twice at once, so a built agent makes exactly one
    member, and no two members may hold the same object. For several members configured alike
    (`count` above 1), give the factory: in every sample the swarm calls `factory(**args)` for
    each member. `member()` itself only checks `args` against the factory's signature.

    Default names are numbered over the roster as a whole, not record by record. Names set with
    `name` are not, so every record with a `name` needs a name of its own.

    Each member runs in its own tool-state scope, named after the member, with its own limits.
    A member that returns normally has submitted, unless its output's stop reason is
    `content_filter` or `model_length`. An agent that raises `LimitExceededError("custom", ...)`
    with no `source` ends only its member, with status `member_limit:custom`.

    With `sandbox`, a member works in its own sandbox environment, which becomes its default;
    the sample's other environments are hidden from it except `visible_sandboxes`.

    Args:
        agent: A built, registered agent, or a registered `@agent` factory.
        args: The factory's keyword arguments. Only for a factory.
        name: The member's name. The default is the agent's or factory's registry name less
            its package, numbered over the roster when several members would share it. With
            `count` above 1 the members are `name-1` to `name-k`. The name is also the
            member's tool-state scope, so it is not empty and has no "/" or "#".
        role: The member's role, given to the controller and in the member's preamble.
        count: How many members this record stands for. Above 1 needs a factory.
        limits: The member's own token, cost, turn, message or time limits.
        bridged: Whether the agent is bridged (runs a CLI in the sandbox through Inspect's agent
            bridge). `None` counts inspect_swe's agents as bridged and others as native.
        delivery: The member's configured delivery mode: `notify` or `poll`. `None` selects
            `notify`.
        sandbox: The name of the member's own sandbox environment. `{member}` stands for the
            member's name. `None` shares the sample's sandbox.
        visible_sandboxes: With `sandbox` only: the sample's other environments that the
            member keeps reaching by name (a shared service, say); never `default`.
        input: The member's own input (a group's goal, a role's brief), in place of the
            sample's; a string is one user message. A controller's `start(input=...)` still
            takes precedence.
        conversational: Under an activation policy, a reply without tool calls ends the
            member's activation and the member goes on at the next one, with no prompt to
            continue added. `swarm()` refuses it under a controller that is not a policy.
        exposure: Under an activation policy, who observes the member's model inputs for
            exposure evidence: the swarm, at each successful model call (`auto`), or only the
            experiment, which calls `record_exposure()` with what its own model-side filter
            let through (`manual`). `swarm()` refuses `manual` under a controller that is
            not a policy.

    Returns:
        The member record.

    Raises:
        TypeError: `agent` is neither a built agent nor an `@agent` factory, `args` does not
            fit the factory's signature, or a limit is not an Inspect limit.
        ValueError: `args` or `count` above 1 with a built agent, a `count` below 1, a bad
            `name` or `delivery`, a working or unknown limit, an ACP agent, or
            `visible_sandboxes` without `sandbox` or with `default`, an empty `input`, an
            `input` list with something other than chat messages, or an `exposure` other
            than `auto` and `manual`.
    """
    built = _is_built_agent(agent)
    if not built and not _is_agent_factory(agent):
        raise TypeError(
            f"member(agent=...): {agent!r} is neither a built agent nor an @agent factory. "
            "Register the agent's factory with @agent and pass the factory or an agent it built."
        )
    if built:
        _refuse_acp(agent, "member(agent=...)")
        if args:
            raise ValueError(
                f"member(args=...): args={dict(args)!r} given with a built agent. args are the "
                "factory's arguments: pass the factory, member(factory, args={...}), or drop args."
            )
        if count != 1:
            raise ValueError(
                f"member(count=...): count={count!r} needs the factory form, since one built "
                "agent is one member. Pass the factory: member(factory, args={...}, "
                f"count={count})."
            )
    else:
        _check_factory_args(cast(AgentFactory, agent), dict(args or {}))
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(
            f"member(count=...): count={count!r} must be a whole number of at least 1."
        )
    if name is not None:
        check_name(name, "member(name=...)")
    if delivery not in (None, "notify", "poll"):
        raise ValueError(
            f"member(delivery=...): delivery={delivery!r} is not a delivery mode. "
            'Use "notify", "poll" or None.'
        )
    member_limits = list(limits or [])
    for limit in member_limits:
        _check_limit(limit)
    if visible_sandboxes and sandbox is None:
        raise ValueError(
            f"member(visible_sandboxes=...): visible_sandboxes={list(visible_sandboxes)!r} "
            "needs sandbox=: a member that shares the sample's sandbox already sees every "
            'environment. Give the member its own, e.g. sandbox="{member}".'
        )
    if "default" in visible_sandboxes:
        raise ValueError(
            "member(visible_sandboxes=...): 'default' cannot be listed: inside the member, "
            "default is its own sandbox. Name the shared services only."
        )
    own_input = _check_input(input)
    if exposure not in get_args(ExposureMode):
        raise ValueError(
            f'member(exposure=...): {exposure!r} is not an exposure mode. Use "auto" (the '
            'swarm checks each model call) or "manual" (only record_exposure() observes).'
        )
    return Member(
        agent=agent if built else None,
        factory=None if built else agent,
        args=dict(args or {}),
        name=name,
        role=role,
        count=count,
        limits=member_limits,
        bridged=bridged,
        delivery=delivery,
        sandbox=sandbox,
        visible_sandboxes=list(visible_sandboxes),
        input=own_input,
        conversational=bool(conversational),
        exposure=exposure,
    )


def _check_input(value: object) -> str | list[ChatMessage] | None:
    if value is None or (isinstance(value, str) and value):
        return value
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and value
        and all(isinstance(m, ChatMessageBase) for m in value)
    ):
        return list(value)
    raise ValueError(
        f"member(input=...): {value!r} is not an input. Give a non-empty string or a "
        "non-empty list of chat messages (ChatMessageUser(...)), or None for the sample's."
    )


@dataclass(frozen=True)
class MemberSpec:
    """One member of the roster, resolved from its record."""

    name: str
    record: Member
    index: int
    sandbox: str | None

    @property
    def info(self) -> MemberInfo:
        return MemberInfo(name=self.name, role=self.record.role)

    @property
    def bridged(self) -> bool:
        if self.record.bridged is not None:
            return self.record.bridged
        target = self.record.factory if self.record.factory is not None else self.record.agent
        return registry_info(target).name.startswith(BRIDGED_NAMESPACE)

    @property
    def delivery(self) -> Delivery:
        return "poll" if self.bridged else (self.record.delivery or "notify")

    @property
    def visible(self) -> list[str]:
        return list(self.record.visible_sandboxes)

    def fresh_limits(self) -> list[Limit]:
        """New limit objects for one run (an inspect limit can be entered only once)."""
        limits = [limit_from_dict(_limit_dict(limit)) for limit in self.record.limits]
        sample_messages = sample_limits().message.limit
        if sample_messages is not None:
            # inspect checks only the innermost message limit, so a member's must keep the sample's
            limits = [
                message_limit(min(int(limit.limit), int(sample_messages)))
                if limit_type(limit) == "message" and limit.limit is not None
                else limit
                for limit in limits
            ]
        return limits

    def build(self) -> Agent:
        """The member's agent for one sample (a factory is called once per member per sample)."""
        if self.record.agent is not None:
            return self.record.agent  # type: ignore[no-any-return]
        agent = self.record.factory(**self.record.args)
        _refuse_acp(agent, f"member {self.name!r}: its factory")
        return agent  # type: ignore[no-any-return]


def resolve_roster(records: Sequence[Member]) -> list[MemberSpec]:
    """Name every member: default names numbered across the roster, counted ones `name-k`."""
    defaults = [_default_name(r) for r in records]
    default_totals: dict[str, int] = {}
    for record, default in zip(records, defaults, strict=True):
        if record.name is None:
            default_totals[default] = default_totals.get(default, 0) + record.count

    seen_agents: dict[int, int] = {}
    numbered: dict[str, int] = {}
    roster: list[MemberSpec] = []
    for position, (record, default) in enumerate(zip(records, defaults, strict=True)):
        if record.agent is not None:
            first = seen_agents.setdefault(id(record.agent), position)
            if first != position:
                raise ValueError(
                    f"swarm(members=...): the agent object of member record {position + 1} is "
                    f"also in record {first + 1}. One built agent is one member; build another "
                    "agent, or use the factory form with count=."
                )
        for copy in range(record.count):
            if record.name is not None:
                name = record.name if record.count == 1 else f"{record.name}-{copy + 1}"
            elif default_totals[default] == 1:
                name = default
            else:
                numbered[default] = numbered.get(default, 0) + 1
                name = f"{default}-{numbered[default]}"
            check_name(name, "swarm(members=...)")
            sandbox = record.sandbox.replace("{member}", name) if record.sandbox else None
            roster.append(MemberSpec(name=name, record=record, index=len(roster), sandbox=sandbox))

    names = [m.name for m in roster]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"swarm(members=...): member names must be unique, and {duplicates!r} appear more "
            "than once. Give each record its own name=."
        )
    if not roster:
        raise ValueError("swarm(members=...): the roster is empty. Give at least one member.")
    return roster


def check_name(name: str, where: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: member name {name!r} is empty. Give a non-empty name.")
    if "/" in name or "#" in name:
        raise ValueError(
            f"{where}: member name {name!r} contains '/' or '#', which tool-state scopes refuse. "
            "Use letters, digits, '-' or '_'."
        )
    if name in RESERVED_NAMES:
        raise ValueError(
            f"{where}: member name {name!r} is reserved: Inspect's timelines read spans named "
            f"{', '.join(RESERVED_NAMES)} as the sample's phases. Choose another name."
        )


def _default_name(record: Member) -> str:
    target = record.factory if record.factory is not None else record.agent
    return registry_unqualified_name(registry_info(target))


def _is_built_agent(obj: object) -> bool:
    return is_registry_object(obj, type="agent") and has_registry_params(obj)


def _is_agent_factory(obj: object) -> bool:
    return callable(obj) and is_registry_object(obj, type="agent") and not has_registry_params(obj)


def _refuse_acp(agent: object, where: str) -> None:
    # ACP agents (inspect_swe.acp.ACPAgent) block until their caller drives them over ACP
    if any(cls.__name__ == "ACPAgent" for cls in type(agent).__mro__):
        raise ValueError(
            f"{where}: {type(agent).__name__} is an ACP agent, which waits for its caller to "
            "drive it and never returns on its own. Use the agent's non-ACP form."
        )


def _check_factory_args(factory: AgentFactory, args: dict[str, Any]) -> None:
    signature = inspect.signature(factory)
    try:
        signature.bind_partial(**args)
    except TypeError as ex:
        name = registry_info(factory).name
        # the parameters' names, not their defaults, which can be pages long (react's prompt)
        params = ", ".join(signature.parameters)
        raise TypeError(
            f"member(args=...): args={sorted(args)!r} do not fit the signature of {name}"
            f"({params}): {ex}. Pass only the factory's keyword arguments."
        ) from None


_LIMIT_TYPES = {"token", "cost", "turn", "message", "time"}


def limit_type(limit: object) -> str | None:
    """The kind of an Inspect limit: `token`, `cost`, `turn`, `message`, `time`, ..."""
    # inspect's limit classes are private; the class name tells the kind
    kind = type(limit).__name__.lstrip("_").removesuffix("Limit").lower()
    return kind or None


def _check_limit(limit: object) -> None:
    if not isinstance(limit, Limit):
        raise TypeError(
            f"member(limits=...): {limit!r} is not an Inspect limit. Use token_limit(), "
            "cost_limit(), turn_limit(), message_limit() or time_limit()."
        )
    kind = limit_type(limit)
    if kind == "working":
        raise ValueError(
            "member(limits=...): working limits are refused: Inspect enforces only the sample's "
            "working limit. Use time_limit() for the member, or the sample's working_limit."
        )
    if kind not in _LIMIT_TYPES:
        raise ValueError(
            f"member(limits=...): {type(limit).__name__} is not a member limit. Use "
            "token_limit(), cost_limit(), turn_limit(), message_limit() or time_limit()."
        )


def _limit_dict(limit: Limit) -> dict[str, Any]:
    kind = limit_type(limit)
    logged: dict[str, Any] = {"type": kind, "limit": limit.limit}
    token_type = getattr(limit, "type", None)
    if kind == "token" and isinstance(token_type, str) and token_type != "all":
        logged["token_type"] = token_type
    return logged


def limit_from_dict(value: Mapping[str, Any]) -> Limit:
    """A member limit from its logged (or CLI) form, `{type: token, limit: 1000}`."""
    kind, amount = value.get("type"), value.get("limit")
    if kind == "token":
        return token_limit(amount, type=value.get("token_type", "all"))
    factories: dict[str, Callable[[Any], Limit]] = {
        "cost": cost_limit,
        "turn": turn_limit,
        "message": message_limit,
        "time": time_limit,
    }
    if kind not in factories:
        raise ValueError(
            f"swarm(members=...): limit {dict(value)!r} has no known type. Use "
            "{type: token|cost|turn|message|time, limit: N}."
        )
    return factories[kind](amount)


def member_from_value(value: object) -> Member:
    """A member from what `swarm(members=...)` accepts: a record, a built agent, a factory,
    a registered factory's name, or the logged/CLI dict form."""
    if isinstance(value, Member):
        return value
    if isinstance(value, str):
        return member(_lookup_factory(value))
    if isinstance(value, Mapping):
        return _member_from_dict(value)
    return member(value)  # type: ignore[arg-type]


def _member_from_dict(value: Mapping[str, Any]) -> Member:
    fields = dict(value)
    factory, built = fields.pop("factory", None), fields.pop("agent", None)
    if (factory is None) == (built is None):
        raise ValueError(
            f"swarm(members=...): {dict(value)!r} must have exactly one of 'factory' (a "
            "registered @agent name) and 'agent'. For example {factory: react, count: 4}."
        )
    target = _lookup_factory(factory) if isinstance(factory, str) else (factory or built)
    limits = [
        limit_from_dict(item) if isinstance(item, Mapping) else item
        for item in fields.pop("limits", None) or []
    ]
    own_input = fields.get("input")
    if isinstance(own_input, list):
        # the logged form of a list of messages
        fields["input"] = [
            _MESSAGE.validate_python(m) if isinstance(m, Mapping) else m for m in own_input
        ]
    unknown = sorted(set(fields) - set(inspect.signature(member).parameters))
    if unknown:
        raise ValueError(
            f"swarm(members=...): unknown member fields {unknown!r} in {dict(value)!r}. "
            f"The fields are those of member(): {', '.join(inspect.signature(member).parameters)}."
        )
    return member(target, limits=limits, **fields)


def _lookup_factory(name: str) -> AgentFactory:
    # the package's own builders (inspect_swarm/swarm_react) answer to their short names too
    for candidate in (name, f"{PACKAGE}/{name}"):
        factory = registry_lookup("agent", candidate)
        if factory is not None and _is_agent_factory(factory):
            return factory  # type: ignore[return-value]
    raise NotRegistered(
        f"swarm(members=...): no @agent factory is registered as {name!r}."
        f"{suggest('agent', name)} Import the module that defines it, or name a registered "
        "agent such as 'react' or 'swarm_react'."
    )
