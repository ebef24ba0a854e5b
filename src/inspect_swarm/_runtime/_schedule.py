"""A member under an activation policy: where it waits between activations, the activation the
policy asks for, and the interventions it commits when it wakes.

The member waits inside its agent's one run (at the boundary `swarm_on_continue()` marks, or
before its agent starts), so its attempts, tools and connections persist. Each activation's
start and end, and each intervention, is an event in the member's span.
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import anyio
from inspect_ai.model import ChatMessage, ChatMessageAssistant
from pydantic import JsonValue

from .._contracts._control import Activation, MemberHandle, Quantum, Transform
from .._contracts._roster import MemberState
from ._bus._evidence import EvidenceLog
from ._member_run import MemberRun
from ._stop import MemberStop


@dataclass(frozen=True)
class _Intervention:
    origin: str
    append: list[ChatMessage] | None = None
    transform: Transform | None = None


def message_hash(message: ChatMessage) -> str:
    """A short hash of what a message says (its id left out), for the `intervened` evidence."""
    body = message.model_dump_json(exclude={"id"})
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _refs(messages: Sequence[ChatMessage]) -> list[JsonValue]:
    return [{"id": m.id, "hash": message_hash(m)} for m in messages]


def _copy(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    return [m.model_copy(deep=True) for m in messages]


class MemberSchedule:
    """One member's activations: the policy's side (`activate`) and the member's (`park`)."""

    def __init__(self, m: MemberRun, log: EvidenceLog) -> None:
        self._m = m
        self._log = log
        self.number = 0
        self.quantum: Quantum = "model_step"
        self.parked = True
        self.stopped = False
        self._grant = anyio.Event()
        self._done: anyio.Event | None = None
        self._pending: list[_Intervention] = []
        # the conversation at the last boundary: the member adds to it only when it runs
        self._snapshot: tuple[ChatMessage, ...] = ()
        self._start_steps = 0
        self._start_length = 0
        self._last: Activation | None = None

    # -- the policy's side ----------------------------------------------------------------

    @property
    def member(self) -> MemberHandle:
        return self._m

    @property
    def waiting(self) -> bool:
        return self.parked and self._m.state != "ended" and not self.stopped

    async def activate(self, quantum: Quantum) -> Activation:
        if quantum not in get_args(Quantum):
            raise ValueError(
                f"ScheduledMember.activate(quantum=...): {quantum!r} is not a quantum. Use "
                '"model_step" or "completion".'
            )
        self._refuse_unless_waiting("activate")
        self.parked = False
        self.quantum = quantum
        done = self._done = anyio.Event()
        self._grant.set()
        await done.wait()
        assert self._last is not None
        return self._last

    def snapshot(self) -> list[ChatMessage]:
        return _copy(self._snapshot)

    def intervene(self, origin: str, call: str, **change: Any) -> None:
        if not isinstance(origin, str) or not origin:
            raise ValueError(
                f"ScheduledMember.{call}(origin=...): {origin!r} is not an origin. Name who "
                'intervenes and why, such as origin="defense".'
            )
        self._refuse_unless_waiting(call)
        self._pending.append(_Intervention(origin, **change))

    def _refuse_unless_waiting(self, call: str) -> None:
        if self.waiting:
            return
        m = self._m
        if m.state == "ended" or self.stopped:
            why = f"it has ended ({m.status})" if m.state == "ended" else "the swarm is stopping"
        else:
            why = "it is running an activation"
        raise RuntimeError(
            f"ScheduledMember.{call}(): member {m.name!r} is not waiting for an activation: "
            f"{why}. Call it once the member's activate() has returned, before the next."
        )

    def stop(self) -> None:
        """The swarm stops: a waiting member ends at once, a running one at its boundary."""
        self.stopped = True
        self._grant.set()

    # -- the member's side ----------------------------------------------------------------

    async def first(self, messages: list[ChatMessage]) -> None:
        """Wait, before the agent starts, for the first activation."""
        self._snapshot = tuple(messages)
        await self._wait(messages)

    async def park(self, messages: list[ChatMessage], kind: Literal["step", "reply"]) -> None:
        """End the activation at a boundary and wait for the next."""
        self._end("waiting", messages, kind)
        await self._wait(messages)

    def ending(self) -> None:
        """The member is ending, in its span: an activation it was in ends with its status."""
        if self._done is not None:
            m = self._m
            self._end(m.status or "cancelled", m.messages, "end", release=False)

    def ended(self) -> None:
        """The member has ended: the policy's `activate()` returns."""
        done, self._done = self._done, None
        if done is not None:
            done.set()

    async def _wait(self, messages: list[ChatMessage]) -> None:
        self.parked = True
        try:
            await self._grant.wait()
        finally:
            self.parked = False
        self._grant = anyio.Event()
        if self.stopped:
            m = self._m
            raise MemberStop(m.name, m.stop_cause or "stopped", m.stop_token)
        self.number += 1
        self._start_steps = self._m.steps
        self._event("activation_start", quantum=self.quantum)
        for intervention in self._pending:
            self._commit(intervention, messages)
        self._pending.clear()
        self._start_length = len(messages)

    def _end(
        self, status: str, messages: list[ChatMessage], boundary: str, *, release: bool = True
    ) -> None:
        m = self._m
        calls = tuple(
            call.function
            for message in messages[self._start_length :]
            if isinstance(message, ChatMessageAssistant)
            for call in message.tool_calls or ()
        )
        steps = m.steps - self._start_steps
        self._snapshot = tuple(messages)
        self._last = Activation(
            m.name, self.number, self.quantum, status, steps, calls, self._snapshot
        )
        self._event(
            "activation_end", status=status, boundary=boundary, steps=steps, tool_calls=list(calls)
        )
        if release:
            self.ended()

    def _commit(self, intervention: _Intervention, messages: list[ChatMessage]) -> None:
        before = {m.id: message_hash(m) for m in messages}
        if intervention.append is not None:
            added = _copy(intervention.append)
            messages.extend(added)
            change: dict[str, JsonValue] = {"added": _refs(added), "removed": [], "replaced": []}
        else:
            assert intervention.transform is not None
            edited = list(intervention.transform(_copy(messages)))
            after = {m.id for m in edited}
            change = {
                "added": _refs([m for m in edited if m.id not in before]),
                "removed": _refs([m for m in messages if m.id not in after]),
                "replaced": _refs(
                    [m for m in edited if m.id in before and message_hash(m) != before[m.id]]
                ),
            }
            messages[:] = edited
        self._event("intervened", origin=intervention.origin, **change)

    def _event(self, kind: str, **data: JsonValue) -> None:
        self._log.log(
            {
                "type": "schedule", "kind": kind, "member": self._m.name,
                "activation": self.number, **data,
            }
        )  # fmt: skip


class ScheduledHandle:
    """The policy's handle on a member (`ScheduledMember`)."""

    def __init__(self, m: MemberRun, schedule: MemberSchedule) -> None:
        self._m = m
        self._schedule = schedule

    @property
    def name(self) -> str:
        return self._m.name

    @property
    def role(self) -> str | None:
        return self._m.role

    @property
    def state(self) -> MemberState:
        return self._m.state

    @property
    def status(self) -> str | None:
        return self._m.status

    @property
    def submitted(self) -> bool:
        return self._m.submitted

    @property
    def waiting(self) -> bool:
        return self._schedule.waiting

    @property
    def activations(self) -> int:
        return self._schedule.number

    async def activate(self, quantum: Quantum = "model_step") -> Activation:
        return await self._schedule.activate(quantum)

    def snapshot(self) -> list[ChatMessage]:
        return self._schedule.snapshot()

    def append(self, messages: Sequence[ChatMessage], *, origin: str) -> None:
        self._schedule.intervene(origin, "append", append=list(messages))

    def edit(self, transform: Transform, *, origin: str) -> None:
        if not callable(transform):
            raise TypeError(
                f"ScheduledMember.edit(transform=...): {transform!r} is not callable. Pass a "
                "function from a list of messages to the list to go on with."
            )
        self._schedule.intervene(origin, "edit", transform=transform)
