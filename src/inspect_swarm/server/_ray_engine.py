"""The engine that runs each sandbox of a run on a node of a Ray cluster.

The scheduling is the local engine's (first in, first out across runs, each run's concurrency,
memory booked against the cluster's), and where each sandbox runs is Ray's: a task that asks
for the sandbox's vCPUs and memory as Ray resources, so Ray's scheduler puts it on a node with
room for it, and queues it until one has. The task makes the sandbox with the same isolation
runtime as this machine's (`_ray_node`), runs the command, and sends the outcome back (output
tails, result file). The server keeps the rest: the API, SQLite, keys.

Long-lived sandboxes (`POST /v1/sandboxes`, E2B) are placed the same way, each held on its
node by a relay that the server's stand-in (`_ray_sandbox`) sends every operation to.
"""

from __future__ import annotations

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
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ._engine import LiveSandbox, SandboxCredentials
from ._isolation import IsolationConfig, SandboxHost
from ._local_engine import EngineRun, LocalEngine
from ._model import GIB, EndStatus, Outcome, Settings, Size
from ._ray_node import Dispatch, Event, NodeJob, NodeSlot, run_slot
from ._ray_sandbox import place_sandbox
from ._runs import Runs
from ._sandbox_command import Slot, Tails, command_env, limits

NODE_STATE_DIR = (
    Path("/var/lib/inspect-swarm-ray")
    if os.geteuid() == 0
    else Path(tempfile.gettempdir()) / f"inspect-swarm-ray-{os.geteuid()}"
)
"""Where each node keeps its sandboxes (each worker process under a directory of its own):
root's, where no other user can make it first (each node checks that it is its user's own)."""

_CANCEL_GRACE_SECONDS = 30.0
"""How long a cancelled sandbox's node has to end it before its end is recorded anyway."""

_MOST_WAITS = 1_000_000
"""The most calls the dispatch actor holds at once (two per running slot)."""

_WILDCARDS = ("0.0.0.0", "::", "")

logger = logging.getLogger(__name__)

_task = ray.remote(max_retries=0, num_returns="streaming")(run_slot)
_dispatch_actor = ray.remote(Dispatch)


@dataclass(eq=False)
class RaySlot(Slot):
    """A run's slot on the Ray engine: the task that holds its room on a node and runs the
    run's sandboxes in turn there (the sandbox it keeps between them is the node's)."""

    run_id: str = ""
    stream: Any = None
    """The task's events, while it runs."""
    node: str | None = None
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
        here = ray.get_runtime_context().get_node_id()
        self._dispatcher: Any = _dispatch_actor.options(  # type: ignore[attr-defined]
            num_cpus=0,
            max_concurrency=_MOST_WAITS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        ).remote()
        self._node_isolation = _node_isolation(host, server_host)

    def _new_slot(self, run: EngineRun) -> Slot:
        return RaySlot(run_id=run.id)

    async def _execute(self, run: EngineRun, idx: int, slot: Slot, tails: Tails) -> Outcome:
        assert isinstance(slot, RaySlot)
        record = run.record
        sandbox_id, item = self.runs.input(run.id, idx)
        credentials = self.credentials.sandbox_env(record.lease_id, sandbox_id, record.lineage)
        job = NodeJob(sandbox_id, item, command_env(record, idx, item, credentials))
        if slot.stream is None:
            size = record.spec.size
            slot.node = None
            node_slot = NodeSlot(
                self._node_isolation, run.id, record.spec, self._dispatcher, slot.id
            )
            slot.stream = _task.options(
                num_cpus=size.vcpus, memory=size.memory_gb * GIB, scheduling_strategy="SPREAD"
            ).remote(node_slot, job)
        else:
            self._dispatcher.give.remote(slot.run_id, slot.id, job)
            if slot.node is not None:
                self.runs.set_node(run.id, idx, slot.node)
        try:
            return await self._follow(run, idx, slot)
        except BaseException:
            # the output so far comes with the node's outcome
            stream, slot.stream = slot.stream, None
            if slot.node is not None:
                # the server stops, or no longer follows
                self._dispatcher.give.remote(slot.run_id, slot.id, None)
            tails.take(await _cancel(stream, started=slot.node is not None))
            raise
        finally:
            self.credentials.revoke(sandbox_id)

    async def _follow(self, run: EngineRun, idx: int, slot: RaySlot) -> Outcome:
        """The sandbox's events from its slot's task, to its outcome (once the slot's sandbox
        has ended, for the run's last)."""
        node = slot.node
        try:
            async for ref in slot.stream:
                event: Event = await ref
                if event[0] == "node":
                    node = slot.node = event[1]
                    self.runs.set_node(run.id, idx, node)
                elif event[0] == "running":
                    self.runs.set_command_running(run.id, idx)
                else:
                    if event[0] == "ran":
                        self.runs.set_command_running(run.id, idx)
                    if not run.queue:
                        await self._end_slot(slot)
                    return event[1]
            outcome = Outcome("failed", f"node {node} ended the sandbox without an outcome")
        except ray.exceptions.NodeDiedError:
            outcome = Outcome("failed", f"node lost: {node}; the sandbox ended with it")
        except ray.exceptions.WorkerCrashedError:
            outcome = Outcome("failed", f"the worker process on node {node} died")
        except ray.exceptions.RayError as ex:
            logger.warning("sandbox %s of run %s failed in Ray: %s", idx, run.id, ex)
            outcome = Outcome("failed", f"internal error on node {node}: {_why(ex)}")
        slot.stream = None  # the next sandbox of the run gets a new slot
        return outcome

    async def _end_slot(self, slot: Slot) -> None:
        """Tell the slot's task to end, and wait (a while) until it has ended its sandbox."""
        assert isinstance(slot, RaySlot)
        stream, slot.stream = slot.stream, None
        if stream is None:
            return
        self._dispatcher.give.remote(slot.run_id, slot.id, None)
        await _drain(stream)

    async def create_sandbox(self, sandbox_id: str, size: Size) -> LiveSandbox:
        """Have Ray place a sandbox outside a run on a node with room for it."""
        return await place_sandbox(self._node_isolation, sandbox_id, limits(size))

    def _end_run(self, run_id: str, status: EndStatus, reason: str) -> None:
        if run_id in self._runs:
            self._dispatcher.cancel.remote(run_id)
        super()._end_run(run_id, status, reason)

    def _maybe_complete(self, run_id: str) -> None:
        super()._maybe_complete(run_id)
        if run_id not in self._runs:
            self._dispatcher.forget.remote(run_id)

    async def aclose(self) -> None:
        """End every sandbox, and leave the cluster."""
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


async def _cancel(stream: Any, started: bool) -> Outcome | None:
    """End a sandbox's slot: one still waiting for a node never starts; a started one (which
    its run's cancel or its stop reaches) is waited for (a while) until its node has ended the
    sandbox and the slot, then killed. The sandbox's outcome, if its node sent it."""
    if not started:
        ray.cancel(stream)
    return await _drain(stream)


async def _drain(stream: Any) -> Outcome | None:
    """Wait (a while) for a slot's task to end, then kill it; the last outcome it sent."""
    outcome = None
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_GRACE_SECONDS) as grace:
        try:
            async for ref in stream:
                event: Event = await ref
                if event[0] in ("ended", "ran"):
                    outcome = event[1]
        except ray.exceptions.RayError:
            pass  # the task's end: cancelled, or its node gone
    if grace.cancelled_caught:
        ray.cancel(stream, force=True)
    return outcome


def _why(ex: ray.exceptions.RayError) -> str:
    """What went wrong in a task: the error it raised, or Ray's own."""
    cause = ex.cause if isinstance(ex, ray.exceptions.RayTaskError) else ex
    return f"{type(cause).__name__}: {cause}"
