"""The engine that runs each sandbox of a run on a node of a Ray cluster.

The scheduling is the local engine's (first in, first out across runs, each run's concurrency,
memory booked against the cluster's), and where each sandbox runs is Ray's: each of a run's
slots asks for its room (the sandbox's vCPUs and memory, `engines.ray._place`), which Ray's scheduler
finds on a node, or queues until one has it. That node's agent (`engines.ray._node`) makes the
sandbox with the same isolation runtime as this machine's, runs the command and answers with
the outcome (output tails, result file), then runs the slot's next sandbox in it made anew.
The server keeps the rest: the API, SQLite, keys.

Long-lived sandboxes (`POST /v1/sandboxes`, E2B) are placed the same way, held by the same
agents, and used through stand-ins that pass every operation on (`engines.ray._sandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import ray
import ray.exceptions

from ...model._types import GIB, Outcome, Settings, Size
from ...records._runs import Runs
from ...sandboxes._isolation import IsolationConfig, SandboxHost
from .._command import Slot, Tails, command_env, limits
from .._engine import LiveSandbox, SandboxCredentials
from .._local import EngineRun, LocalEngine
from ._node import NodeJob, pack, unpack
from ._place import Agents, Room
from ._sandbox import place_sandbox

NODE_STATE_DIR = (
    Path("/var/lib/inspect-swarm-ray")
    if os.geteuid() == 0
    else Path(tempfile.gettempdir()) / f"inspect-swarm-ray-{os.geteuid()}"
)
"""Where each node keeps its sandboxes (each agent process under a directory of its own):
root's, where no other user can make it first (each node checks that it is its user's own)."""

_CANCEL_GRACE_SECONDS = 30.0
"""How long a cancelled sandbox's node has to end it before its end is recorded anyway."""

_HOLD_SECONDS = 0.1
"""How long the server waits for a sandbox's outcome before it asks whether its command has
begun: a command that ends within it costs one call, a longer one is seen running this much
later."""

_WILDCARDS = ("0.0.0.0", "::", "")

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class RaySlot(Slot):
    """A run's slot on the Ray engine: its room on a node, and the agent there that runs the
    run's sandboxes in turn (the sandbox it keeps between them is the agent's)."""

    room: Room | None = None
    agent: Any = None
    """The agent of the slot's node, once Ray has placed its room."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


def connect(address: str | None) -> int:
    """Join the Ray cluster at `address` (the one this machine is part of, when None) as its
    driver; the memory of its nodes, in whole GiB."""
    if not ray.is_initialized():
        ray.init(
            address=address or "auto",
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return int(resources.get("memory", 0) // GIB)


class RayEngine(LocalEngine):
    """Runs the sandboxes of one server's runs on the nodes of a Ray cluster (an `Engine`)."""

    def __init__(
        self,
        runs: Runs,
        host: SandboxHost,
        settings: Settings,
        credentials: SandboxCredentials,
        address: str | None,
        server_host: str,
    ) -> None:
        super().__init__(runs, host, settings, credentials)
        connect(address)
        self._agents = Agents(_node_isolation(host, server_host))
        self._agents.start()

    def _new_slot(self) -> Slot:
        return RaySlot()

    async def _execute(self, run: EngineRun, idx: int, slot: Slot, tails: Tails) -> Outcome:
        assert isinstance(slot, RaySlot)
        record = run.record
        sandbox_id, item = self.runs.input(run.id, idx)
        credentials = self.credentials.sandbox_env(record.lease_id, sandbox_id, record.lineage)
        env = command_env(record, idx, item, credentials)
        try:
            if slot.room is None:
                slot.room = Room(limits(record.spec.size))
                slot.node = await slot.room.node()
                slot.agent = self._agents.on(slot.node)
                self.runs.set_node(run.id, idx, slot.node)  # the next ones boot there
            job = NodeJob(slot.id, sandbox_id, record.spec, item, env, bool(run.queue))
            return await self._follow(run, idx, slot, job, tails)
        finally:
            self.credentials.revoke(sandbox_id)

    async def _follow(
        self, run: EngineRun, idx: int, slot: RaySlot, job: NodeJob, tails: Tails
    ) -> Outcome:
        """Have the slot's agent run `job`; its outcome (its command's start recorded on the
        way, for one that runs a while)."""
        answer = slot.agent.run.remote(pack(job)).as_future()
        try:
            if await _began(slot, job, answer):
                self.runs.set_command_running(run.id, idx)
            return unpack(await asyncio.shield(answer), Outcome)
        except ray.exceptions.RayActorError as ex:
            why, ended = await self._agents.lost(slot.node or "", slot.agent, ex)
            if not ended:
                slot.agent.stop.remote(slot.id, job.sandbox_id)  # if the agent lives, it ends it
            return self._lost(slot, why)
        except ray.exceptions.RayError as ex:
            logger.warning("sandbox %s of run %s failed in Ray: %s", idx, run.id, ex)
            return self._lost(slot, f"internal error on node {slot.node}: {_why(ex)}")
        except BaseException:
            # stopped (the run cancelled, or the server stopping): ended on its node, and
            # the output so far comes with its outcome
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_GRACE_SECONDS):
                slot.agent.stop.remote(slot.id, job.sandbox_id)
                tails.take(await _settled(answer))
            raise

    def _lost(self, slot: RaySlot, why: str) -> Outcome:
        """The slot's agent is gone: the sandbox failed, and the run's next gets a new slot."""
        slot.agent = slot.node = None
        if slot.room is not None:
            slot.room.release()
            slot.room = None
        return Outcome("failed", why)

    async def _end_slot(self, slot: Slot) -> None:
        """End the sandbox the slot kept on its node, then give its room back."""
        assert isinstance(slot, RaySlot)
        room, slot.room = slot.room, None
        agent, slot.agent = slot.agent, None
        if agent is not None:
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(_CANCEL_GRACE_SECONDS),
                contextlib.suppress(ray.exceptions.RayError),
            ):
                await agent.end_slot.remote(slot.id)
        if room is not None:
            room.release()

    async def create_sandbox(self, sandbox_id: str, size: Size) -> LiveSandbox:
        """Have Ray place a sandbox outside a run on a node with room for it."""
        return await place_sandbox(self._agents, sandbox_id, limits(size))

    async def aclose(self) -> None:
        """End every sandbox on the nodes and here, and leave the cluster."""
        await self._agents.aclose()
        await super().aclose()
        ray.shutdown()


def ray_isolation(host: SandboxHost) -> dict[str, object]:
    """The isolation of the sandboxes on every node, as the API reports it: the server's
    machine's, which each node gives or fails its sandboxes saying why."""
    isolation = host.describe()
    return {**isolation, "engine": "ray", "note": f"on Ray nodes: {isolation['note']}"}


def _node_isolation(host: SandboxHost, server_host: str) -> IsolationConfig:
    """The isolation config each node makes its sandboxes with: the server's, in the mode of
    the server's machine, with the node's state directory, and sandboxes reaching the server
    where the nodes reach it (this machine's address in the cluster, for a wildcard)."""
    config = host.config
    forward = config.forward
    if forward is not None:
        reached = server_host
        if server_host in _WILDCARDS:
            reached = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        _check_reached(reached, server_host)
        forward = (reached, forward[1])
    return replace(config, state_dir=NODE_STATE_DIR, mode=host.mode, forward=forward)


def _check_reached(address: str, server_host: str) -> None:
    """Refuse a loopback address for the server when the cluster has nodes on other
    machines: their sandboxes would reach their own machine's loopback, not the server."""
    if not _loopback(address):
        return
    elsewhere = sorted(
        {
            str(n["NodeManagerAddress"])
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n["Alive"] and not _loopback(str(n["NodeManagerAddress"]))
        }
    )
    if elsewhere:
        raise ValueError(
            f"--host: {server_host!r} is this machine's loopback, which the cluster's nodes on "
            f"other machines ({', '.join(elsewhere)}) cannot reach the server on; give --host "
            "an address they reach, or 0.0.0.0"
        )


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


async def _began(slot: RaySlot, job: NodeJob, answer: asyncio.Future[bytes]) -> bool:
    """Whether the job's command has begun, once it has; False once it ended first (its end
    is then all there is to record)."""
    hold = _HOLD_SECONDS
    while not (await asyncio.wait({answer}, timeout=hold))[0]:
        began = slot.agent.started.remote(slot.id, job.sandbox_id).as_future()
        await asyncio.wait({answer, began}, return_when=asyncio.FIRST_COMPLETED)
        if began.done() and not began.exception() and began.result():
            return True
        began.cancel()
        hold = min(hold * 2, 1.0)  # not begun there yet: ask again, less often
    return False


async def _settled(answer: asyncio.Future[bytes]) -> Outcome | None:
    """The outcome, once the agent has answered; None when it could not."""
    await asyncio.wait({answer})
    return None if answer.exception() else unpack(answer.result(), Outcome)


def _why(ex: ray.exceptions.RayError) -> str:
    """What went wrong in a call: the error it raised, or Ray's own."""
    cause = ex.cause if isinstance(ex, ray.exceptions.RayTaskError) else ex
    return f"{type(cause).__name__}: {cause}"
