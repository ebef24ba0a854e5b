"""The slot runner of a Ray cluster: each sandbox of a run on a node of the cluster.

The scheduling is the shared scheduler's (`engines._scheduler`: first in, first out across
runs, each run's concurrency, memory booked against the cluster's), and where each sandbox runs
is Ray's: each of a run's slots asks for its room (the sandbox's vCPUs and memory,
`engines.ray._place`), which Ray's scheduler finds on a node, or queues until one has it. That
node's agent (`engines.ray._node`) makes the sandbox with the same isolation runtime as this
machine's, runs the command and answers with the outcome (output tails, result file), then
runs the slot's next sandbox in it made anew. The server keeps the rest: the API, SQLite, keys.

Long-lived sandboxes (`POST /v1/sandboxes`, E2B) are placed the same way, held by the same
agents, and used through stand-ins that pass every operation on (`engines.ray._sandbox`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import tempfile
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import anyio.abc
import ray
import ray.exceptions

from ...model._types import GIB, Outcome, Size
from ...sandboxes._isolation import (
    IsolationConfig,
    SandboxError,
    SandboxHost,
    base_cgroup_name,
)
from ...sandboxes._network import Outbound
from .._command import Capacity, limits
from .._engine import LiveSandbox, Origin
from .._scheduler import Turn
from ._calls import AgentHandle, Pending, answer, first
from ._node import NodeJob, pack, unpack
from ._place import Agents, Room
from ._sandbox import Placing, RaySandbox, place_sandbox
from ._snapshots import NodeSnapshots

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

_VIEW_SECONDS = 3.0
"""How often the runner looks again at the cluster's nodes (which join and leave)."""

_WILDCARDS = ("0.0.0.0", "::", "")

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class RaySlot:
    """A run's slot on the Ray engine: its room on a node, and the agent there that runs the
    run's sandboxes in turn (the sandbox it keeps between them is the agent's)."""

    room: Room | None = None
    node: str | None = None
    """The node Ray placed its room on (None until it has)."""
    agent: AgentHandle | None = None
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


class RayRunner:
    """Runs the sandboxes of one server on the nodes of a Ray cluster (a `SlotRunner` of
    `RaySlot`s)."""

    def __init__(self, host: SandboxHost, address: str | None, server_host: str) -> None:
        if host.config.network == "nat":
            raise ValueError(
                "--network nat: the Ray engine's nodes give sandboxes no way out; run with "
                "--engine local, or leave --network at none"
            )
        self._host = host
        host.reap_leftovers()
        connect(address)
        self._nodes = node_capacities()
        self._unfit: dict[Size, str | None] = {}
        """What `unfit` answered for each size since the nodes were last looked at."""
        self._agents = Agents(_node_isolation(host, server_host))
        self._agents.start()
        self._snapshots = NodeSnapshots()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Look at the cluster's nodes every few seconds, for `unfit`."""
        task_status.started()
        while True:
            await anyio.sleep(_VIEW_SECONDS)
            try:
                self._nodes = await anyio.to_thread.run_sync(node_capacities)
                await anyio.to_thread.run_sync(self._snapshots.look)
            except Exception as ex:  # the cluster did not answer: the last view holds
                logger.warning("could not list the Ray cluster's nodes: %s", ex)
            self._unfit.clear()

    def unfit(self, size: Size) -> str | None:
        """Why no node of the cluster can hold a sandbox of `size` now (None when one can)."""
        if size not in self._unfit:
            self._unfit[size] = _unfit(self._nodes, size)
        return self._unfit[size]

    def new_slot(self) -> RaySlot:
        """A slot that asks Ray for its room as it runs its first sandbox."""
        return RaySlot()

    async def run(self, slot: RaySlot, turn: Turn) -> Outcome:
        """Have the agent of the slot's node run the sandbox of `turn` (the slot's room asked
        of Ray first, for its first sandbox or the first after its node was lost)."""
        agent = slot.agent or await self._place(slot, turn)
        command = turn.command
        job = NodeJob(
            slot.id, turn.sandbox_id, command.spec, command.item, dict(command.env), turn.more()
        )
        return await self._follow(slot, agent, job, turn)

    async def _place(self, slot: RaySlot, turn: Turn) -> AgentHandle:
        """Ask Ray for the slot's room; the agent of the node it placed it on."""
        _release(slot)  # the room of a try that failed midway, if any
        slot.room = Room(limits(turn.command.spec.size))
        node = await slot.room.node()
        slot.node, slot.agent = node, self._agents.on(node)
        turn.placed(node)  # the slot's next ones boot there
        return slot.agent

    async def _follow(self, slot: RaySlot, agent: AgentHandle, job: NodeJob, turn: Turn) -> Outcome:
        """Have the slot's agent run `job`; its outcome (its command's start told on the way,
        for one that runs a while)."""
        answer = Pending(agent.run.remote(pack(job)))
        try:
            if await _began(agent, job, answer):
                turn.command.started()
            return unpack(await answer.result(), Outcome)
        except ray.exceptions.RayActorError as ex:
            why, ended = await self._agents.lost(slot.node or "", agent, ex)
            if not ended:
                agent.stop.remote(slot.id, job.sandbox_id)  # if the agent lives, it ends it
            return _lost(slot, why)
        except ray.exceptions.RayError as ex:
            logger.warning("sandbox %s failed in Ray: %s", job.sandbox_id, ex)
            return _lost(slot, f"internal error on node {slot.node}: {_why(ex)}")
        except BaseException:
            # stopped (the run cancelled, or the server stopping): ended on its node, and
            # the output so far comes with its outcome
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_GRACE_SECONDS):
                agent.stop.remote(slot.id, job.sandbox_id)
                turn.command.tails.take(await _settled(answer))
            raise

    async def end_slot(self, slot: RaySlot) -> None:
        """End the sandbox the slot kept on its node, then give its room back."""
        room, slot.room = slot.room, None
        agent, slot.agent = slot.agent, None
        if agent is not None:
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(_CANCEL_GRACE_SECONDS),
                contextlib.suppress(ray.exceptions.RayError),
            ):
                await answer(agent.end_slot.remote(slot.id))
        if room is not None:
            room.release()

    async def create_sandbox(
        self, sandbox_id: str, size: Size, outbound: Outbound | None, files: Origin = None
    ) -> LiveSandbox:
        """Have Ray place a sandbox outside a run on a node with room for it: the node that
        holds its snapshot, or its source's for a fork (SandboxError once that node has
        left the cluster)."""
        assert outbound is None, "the Ray engine refuses --network nat: its nodes give no way out"
        assert files is None or isinstance(files, str | RaySandbox), "the Ray engine's own"
        if isinstance(files, str):
            await self._snapshots.learned()
            if self._snapshots.node(files) is None:
                raise SandboxError(f"snapshot {files}: {self._snapshots.lost(files)}")
        placing = Placing(sandbox_id, limits(size), files)
        return await place_sandbox(self._agents, self._snapshots, placing)

    def snapshot_lost(self, snapshot_id: str) -> str | None:
        """Why a snapshot is gone (its node left the cluster), as the cluster was last seen."""
        return self._snapshots.lost(snapshot_id)

    async def drop_snapshot(self, snapshot_id: str) -> None:
        """Have the agent of the snapshot's node remove it (one gone with its node is)."""
        held = self._snapshots.lost(snapshot_id) is None
        node = self._snapshots.forget(snapshot_id)
        if node is None or not held:
            return
        with (
            anyio.move_on_after(_CANCEL_GRACE_SECONDS),
            contextlib.suppress(ray.exceptions.RayError),
        ):
            await answer(self._agents.on(node).drop_snapshot.remote(snapshot_id))

    def keep_snapshots(self, snapshot_ids: Collection[str]) -> None:
        """Have each node's agent remove every snapshot but these, and learn where the rest
        are (in the background: a sandbox made from one waits until they have said)."""
        self._snapshots.keep(self._agents.all(), snapshot_ids)

    async def aclose(self) -> None:
        """End every sandbox on the nodes and here, and leave the cluster."""
        await self._agents.aclose()
        await self._host.aclose()
        self._host.cgroups.remove_base()
        ray.shutdown()


def _lost(slot: RaySlot, why: str) -> Outcome:
    """The slot's agent is gone: the sandbox failed, and the run's next gets a new room."""
    _release(slot)
    return Outcome("failed", why)


def _release(slot: RaySlot) -> None:
    """Give the slot's room back, and forget its node's agent."""
    slot.agent = slot.node = None
    if slot.room is not None:
        slot.room.release()
        slot.room = None


def _unfit(nodes: list[Capacity], size: Size) -> str | None:
    """Why none of `nodes` can hold a sandbox of `size` (None when one can)."""
    if any(node.holds(size) for node in nodes):
        return None
    largest = max(nodes, key=lambda n: (n.cpus, n.memory_bytes), default=Capacity(0, 0))
    return largest.too_small(size, "the largest node of the Ray cluster")


def node_capacities() -> list[Capacity]:
    """The CPUs and memory of each live node of the cluster, as Ray counts them (blocks)."""
    return [
        Capacity(float(node["Resources"].get("CPU", 0)), int(node["Resources"].get("memory", 0)))
        for node in ray.nodes()  # type: ignore[no-untyped-call]
        if node["Alive"]
    ]


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
    # the server's snapshots on each node: past its agents' end and the server's restarts
    snapshots = NODE_STATE_DIR / "snapshots" / base_cgroup_name(config.state_dir)
    return replace(
        config, state_dir=NODE_STATE_DIR, snapshot_dir=snapshots, mode=host.mode, forward=forward
    )


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


async def _began(agent: AgentHandle, job: NodeJob, answer: Pending[bytes]) -> bool:
    """Whether the job's command has begun, once it has; False once it ended first (its end
    is then all there is to record)."""
    hold = _HOLD_SECONDS
    while True:
        with anyio.move_on_after(hold):
            await answer.wait()
            return False
        began = Pending(agent.started.remote(job.slot_id, job.sandbox_id))
        await first(answer, began)
        if began.done:
            with contextlib.suppress(Exception):  # an agent that could not say has not
                if await began.result():
                    return True
        hold = min(hold * 2, 1.0)  # not begun there yet: ask again, less often


async def _settled(answer: Pending[bytes]) -> Outcome | None:
    """The outcome, once the agent has answered; None when it could not."""
    try:
        return unpack(await answer.result(), Outcome)
    except Exception:
        return None


def _why(ex: ray.exceptions.RayError) -> str:
    """What went wrong in a call: the error it raised, or Ray's own."""
    cause = ex.cause if isinstance(ex, ray.exceptions.RayTaskError) else ex
    return f"{type(cause).__name__}: {cause}"
