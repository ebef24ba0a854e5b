"""`swarm()`: the agent. It resolves and checks the roster, controller, channels and budget
when called, and runs a `SwarmRun` in each sample."""

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from inspect_ai._util.logger import warn_once
from inspect_ai._util.registry import (
    is_registry_object,
    registry_info,
    registry_unqualified_name,
)
from inspect_ai.agent import Agent, AgentState, agent
from inspect_ai.model import Model, get_model

from ._channels._filesystem_channel import FilesystemChannel
from ._contracts._budget import Budget, check_split
from ._contracts._channel import Channel
from ._contracts._controller import Controller
from ._contracts._factory import create_by_name
from ._contracts._member import Member, MemberSpec, member_from_value, resolve_roster
from ._run import SwarmRun
from ._runtime._sandbox import check_member_sandboxes, sample_has_sandbox

_logger = logging.getLogger(__name__)

_NO_SANDBOX = (
    "swarm(): the filesystem channel (the default) tells members to share files in {shared} "
    "of the sample's sandbox, and this sample has none. Pass channels=[] for no channel, or "
    "channels=[shared_memory()] for a board the swarm records."
)


@agent
def swarm(
    members: Member | Agent | Sequence[Member | Agent],
    *,
    controller: str | Controller = "leaderless",
    channels: str | Channel | Sequence[str | Channel] = ("filesystem",),
    budget: Budget = Budget(),  # noqa: B008
    routes: Sequence[tuple[str, str] | Sequence[str]] | None = None,
) -> Agent:
    """A swarm of agents working on one sample.

    The sample gets one timeline per member, named after the member, so a member's name must
    differ from every other timeline's in the sample, the other swarms' members included: a
    sample that runs swarms more than once builds each with names of its own. Nor may a member
    be called `init`, `solvers` or `scorers`, the span names Inspect's timelines take for the
    sample's phases.

    Args:
        members: The roster: built agents or `member()` records. A bare agent is
            `member(agent)`. A factory-form `member()` may stand for several members (`count`).
        controller: What runs the swarm: it decides which members start, when, on what input,
            and when the swarm has finished. A name stands for that registered controller,
            built with its defaults.
        channels: The ways members share information. A name stands for that registered
            channel, built with its defaults. `[]` gives none, and members then get no channel
            instructions (a sandbox they share stays shared all the same).
        budget: The swarm-wide caps.
        routes: The directed routes an addressed record (a message) may take, as
            `(sender, recipient)` pairs of member names. A recipient with no route from the
            sender is dropped from the record, and a record left with none is refused to the
            sender as a tool error (the control `route`). `None` lets every member reach
            every other.

    Returns:
        The swarm, an agent to use as a task's solver or inside another agent.

    Raises:
        TypeError: `controller`, `channels` or `budget` is not of a type it accepts.
        ValueError: The parts do not fit together: a roster the controller or a channel
            refuses, routes or channel readers and writers naming no member, a
            conversational member or one with manual exposure without an activation policy,
            repeated channels, a controller that needs a channel that hands out work without
            one, a split with the wrong number of weights, or member sandboxes
            the channels cannot serve.
    """
    roster = resolve_roster(_records(members))
    ctrl = _controller(controller)
    chans = _channels(channels)
    swarm_budget = _budget(budget)
    _check(roster, ctrl, chans, swarm_budget)
    pairs = _routes(routes, roster)
    _check_scheduling(roster, ctrl, chans)

    async def execute(state: AgentState) -> AgentState:
        _warn_without_sandbox(chans)
        models = [str(get_model()), *_member_models(roster)]
        run = SwarmRun(roster, ctrl, chans, swarm_budget, models, pairs)
        return await run.run(state)

    return execute


def _records(members: object) -> list[Member]:
    if isinstance(members, (str, Mapping, Member)) or not isinstance(members, Sequence):
        members = [members]
    return [member_from_value(value) for value in members]


def _controller(value: object) -> Controller:
    if isinstance(value, str):
        value = create_by_name("swarm_controller", value, "swarm(controller=...)")
    if not isinstance(value, Controller):
        raise TypeError(
            f"swarm(controller=...): {value!r} is not a Controller. Pass a registered "
            'controller\'s name, such as "leaderless", or the object a @swarm_controller '
            "factory returns."
        )
    return value


def _channels(value: object) -> list[Channel]:
    if isinstance(value, (str, Channel)):
        value = [value]
    if not isinstance(value, Sequence):
        raise TypeError(
            f"swarm(channels=...): {value!r} is not a channel or a list of channels. Pass "
            '"filesystem", shared_memory(), a list of them, or [] for none.'
        )
    channels: list[Channel] = []
    for item in value:
        channel = (
            create_by_name("swarm_channel", item, "swarm(channels=...)")
            if isinstance(item, str)
            else item
        )
        if not isinstance(channel, Channel):
            raise TypeError(
                f"swarm(channels=...): {item!r} is not a Channel. Pass a registered channel's "
                "name or the object a @swarm_channel factory returns."
            )
        channels.append(channel)
    _check_unique_channels(channels)
    return channels


def _check_unique_channels(channels: Sequence[Channel]) -> None:
    kinds = [registry_unqualified_name(registry_info(ch)) for ch in channels]
    for attribute, values in (
        ("kind", kinds),
        ("name", [ch.name for ch in channels if ch.name is not None]),
        ("prefix", [ch.prefix for ch in channels if ch.prefix is not None]),
    ):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            what = "is given more than once" if attribute == "kind" else f"share the {attribute}"
            raise ValueError(
                f"swarm(channels=...): channels {repeated!r} {what}. Each channel can be given "
                "once, and no two channels may share a name or a prefix."
            )


def _budget(value: object) -> Budget:
    if isinstance(value, Budget):
        return value
    if isinstance(value, Mapping):
        return Budget.model_validate(dict(value))
    raise TypeError(
        f"swarm(budget=...): {value!r} is not a Budget. Pass Budget(...), or from the command "
        "line a mapping such as -S 'budget={time: 600, split: equal}'."
    )


def _check(
    roster: Sequence[MemberSpec],
    controller: Controller,
    channels: Sequence[Channel],
    budget: Budget,
) -> None:
    infos = [m.info for m in roster]
    if controller.check is not None:
        controller.check(infos)
    for channel in channels:
        channel.check(infos)
    _check_work(controller, channels)
    check_split(budget.split, len(roster))
    check_member_sandboxes(roster)
    _check_bridged(roster, channels)
    _check_filesystem(roster, channels)


def _check_work(controller: Controller, channels: Sequence[Channel]) -> None:
    if not controller.needs_work or any(ch.hands_out_work for ch in channels):
        return
    kinds = [registry_unqualified_name(registry_info(ch)) for ch in channels]
    name = f" {registry_unqualified_name(controller)!r}" if is_registry_object(controller) else ""
    raise ValueError(
        f"swarm(): the controller{name} starts members on the work a channel gives them, and "
        f"none of the channels {kinds!r} hands out work. Add one that does, such as tasks() "
        "or messages(), to channels=."
    )


def _check_bridged(roster: Sequence[MemberSpec], channels: Sequence[Channel]) -> None:
    native_only = [
        registry_unqualified_name(registry_info(ch))
        for ch in channels
        if ch.name and not ch.bridged
    ]
    bridged = [m.name for m in roster if m.bridged]
    if native_only and bridged:
        raise ValueError(
            f"swarm(): bridged members {bridged!r} cannot use the channels {native_only!r}, "
            "whose tools serve native members only (their Channel.bridged is False). Drop "
            "those channels for this arm, or make the members native. The built-in channels "
            "with tools (shared_memory, messages, tasks, notes) serve bridged members too, "
            "through swarm_bridged_tools()."
        )


def _check_filesystem(roster: Sequence[MemberSpec], channels: Sequence[Channel]) -> None:
    own = any(m.sandbox is not None for m in roster)
    for channel in channels:
        if not isinstance(channel, FilesystemChannel):
            continue
        if own and not channel.shared_volume:
            raise ValueError(
                "swarm(channels=...): the filesystem channel describes a shared sandbox, and these "
                "members have their own. Pass channels=[], channels=[shared_memory()] for a "
                "board, or filesystem(shared_volume=True) for a volume every sandbox mounts."
            )
        if not own and channel.shared_volume:
            raise ValueError(
                "swarm(channels=...): filesystem(shared_volume=True) is for members with their own "
                "sandboxes, and these members share the sample's. Use filesystem() instead."
            )


def _warn_without_sandbox(channels: Sequence[Channel]) -> None:
    """Say once that the filesystem channel speaks of a sandbox the sample does not have."""
    if sample_has_sandbox():
        return
    for channel in channels:
        if isinstance(channel, FilesystemChannel) and not channel.shared_volume:
            warn_once(_logger, _NO_SANDBOX.format(shared=channel.shared))


def _routes(
    value: Sequence[tuple[str, str] | Sequence[str]] | None, roster: Sequence[MemberSpec]
) -> list[tuple[str, str]] | None:
    if value is None:
        return None
    names = {m.name for m in roster}
    pairs: list[tuple[str, str]] = []
    for route in value:
        if isinstance(route, str) or not isinstance(route, Sequence) or len(route) != 2:
            raise ValueError(
                f"swarm(routes=...): {route!r} is not a route. Give (sender, recipient) pairs of "
                'member names, such as [("alice", "bob")].'
            )
        unknown = [n for n in route if n not in names]
        if unknown:
            raise ValueError(
                f"swarm(routes=...): route {tuple(route)!r} names {unknown!r}, which is no "
                f"member; the members are {sorted(names)!r}."
            )
        pairs.append((route[0], route[1]))
    return pairs


def _check_scheduling(
    roster: Sequence[MemberSpec], controller: Controller, channels: Sequence[Channel]
) -> None:
    names = {m.name for m in roster}
    for channel in channels:
        for field in ("readers", "writers"):
            listed: frozenset[str] | None = getattr(channel, field)
            unknown = sorted(listed - names) if listed is not None else []
            if unknown:
                raise ValueError(
                    f"swarm(channels=...): the {channel.name} channel's {field} {unknown!r} "
                    f"are no members; the members are {sorted(names)!r}."
                )
    if controller.policy:
        return
    for refused, why, option in (
        (
            [m.name for m in roster if m.record.conversational],
            "are conversational, which only an activation policy can run (a reply would "
            "otherwise go on forever)",
            "conversational=True",
        ),
        (
            [m.name for m in roster if m.record.exposure == "manual"],
            "have exposure='manual', but exposure evidence is recorded only under an "
            "activation policy",
            "exposure='manual'",
        ),
    ):
        if refused:
            raise ValueError(
                f"swarm(): members {refused!r} {why}. Use controller=round_robin() or "
                f"superstep(), or drop {option}."
            )


def _member_models(roster: Sequence[MemberSpec]) -> list[str]:
    # models a member names in its factory arguments; others use the eval's model
    models: list[str] = []
    for m in roster:
        model: Any = m.record.args.get("model")
        if isinstance(model, (str, Model)):
            models.append(str(model) if isinstance(model, Model) else model)
    return models
