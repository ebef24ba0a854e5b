"""Where the Ray engine's sandboxes go: room on a node, which Ray's scheduler finds, and the
node's agent, which makes the sandboxes there.

A run's slot, or a long-lived sandbox, asks for its room as a placement group of one bundle:
the sandbox's vCPUs as `CPU` and its memory as `memory`. Ray puts the bundle on a node with
that much free, or holds it in its queue until one has, and keeps the room booked until the
server gives it back; the sandboxes in it are made by the agent the server keeps on that
node (`engines.ray._node`), made when the engine starts (for every node with CPUs then) or on first
use (for nodes that join later), and made again when one has died.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import ray
import ray.exceptions
from ray.actor import ActorHandle
from ray.util.placement_group import (
    NODE_ID_LABEL_KEY,
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...sandboxes._cgroups import Limits
from ...sandboxes._isolation import IsolationConfig, SandboxError
from ._calls import AgentHandle, answer
from ._node import NodeAgent

_CALLS = 100_000
"""The most calls one agent serves at once (a long-lived sandbox's reads and waits among
them)."""

_CLOSE_SECONDS = 30.0
"""How long an agent has to end its node's sandboxes when the server stops."""

_LOST_SECONDS = 60.0
"""How long an agent the server lost touch with is waited for (the cluster counts a node
dead once it has missed its health checks for a while: 15 s by Ray's defaults)."""
_LOST_CHECKS = 120

logger = logging.getLogger(__name__)

_agent = ray.remote(NodeAgent)


class Room:
    """Room for one slot or sandbox on a node of the cluster (a placement group of one
    bundle, which Ray places)."""

    def __init__(self, cap: Limits, node: str | None = None) -> None:
        """Room of `cap`, on `node` when given (else where Ray finds it)."""
        self._group: PlacementGroup = placement_group(
            [{"CPU": cap.vcpus, "memory": cap.memory_bytes}],
            bundle_label_selector=None if node is None else [{NODE_ID_LABEL_KEY: node}],
        )

    async def node(self) -> str:
        """The node Ray placed it on, once it has (waiting in Ray's queue for room)."""
        await answer(self._group.ready())
        table: dict[str, Any] = await anyio.to_thread.run_sync(placement_group_table, self._group)
        return str(table["bundles_to_node_id"][0])

    def release(self) -> None:
        """Give the room back (or stop waiting for it)."""
        with contextlib.suppress(Exception):  # the cluster may be gone with the server
            remove_placement_group(self._group)


class Agents:
    """The agent of each node this server has made sandboxes on."""

    def __init__(self, isolation: IsolationConfig) -> None:
        self._isolation = isolation
        self._agents: dict[str, AgentHandle] = {}
        self._verdicts: dict[AgentHandle, _Verdict] = {}
        """What became of each agent lost (one per agent that died: few)."""

    def start(self) -> None:
        """Make an agent on every node with CPUs now (an agent's process takes a while to
        start: not while a sandbox waits for it)."""
        for node in ray.nodes():  # type: ignore[no-untyped-call]
            if node["Alive"] and node["Resources"].get("CPU", 0) > 0:
                self.on(str(node["NodeID"]), str(node["NodeManagerAddress"]))

    def on(self, node: str, address: str | None = None) -> AgentHandle:
        """The agent on `node` (made if this server has none there, told the node's
        `address` in the cluster: looked up when not given)."""
        agent = self._agents.get(node)
        if agent is None:
            made = _agent.options(  # type: ignore[attr-defined]
                num_cpus=0,
                max_concurrency=_CALLS,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            ).remote(self._isolation, node, address or _address(node))
            agent = self._agents[node] = cast(AgentHandle, made)
        return agent

    def all(self) -> list[tuple[str, AgentHandle]]:
        """Each node's agent made so far, with its node."""
        return list(self._agents.items())

    async def lost(
        self, node: str, agent: AgentHandle, ex: ray.exceptions.RayActorError
    ) -> tuple[str, bool]:
        """The server lost the agent on `node` (`ex`): forget it; what that did to a sandbox
        of it, and whether the sandbox surely ended (else it may run on, to be stopped).
        Every sandbox of the agent learns it from one look at the cluster."""
        if self._agents.get(node) == agent:
            del self._agents[node]
        while True:
            verdict = self._verdicts.get(agent)
            if verdict is None:
                verdict = self._verdicts[agent] = _Verdict()
                try:
                    verdict.found = await _judge(node, ex)
                finally:
                    if verdict.found is None:  # cancelled: the next one asking judges
                        del self._verdicts[agent]
                    verdict.done.set()
            await verdict.done.wait()
            if verdict.found is not None:
                return verdict.found

    async def aclose(self) -> None:
        """End every sandbox of every agent, then the agents."""
        agents, self._agents = list(self._agents.values()), {}
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_SECONDS):
            async with anyio.create_task_group() as tg:
                for agent in agents:
                    tg.start_soon(_close, agent)
        for agent in agents:
            with contextlib.suppress(Exception):
                ray.kill(cast(ActorHandle[Any], agent))  # the handle it is


@dataclass
class _Verdict:
    """What became of a lost agent, once the cluster has said."""

    done: anyio.Event = field(default_factory=anyio.Event)
    found: tuple[str, bool] | None = None


async def _judge(node: str, ex: ray.exceptions.RayActorError) -> tuple[str, bool]:
    """What losing the agent on `node` (`ex`) did to its sandboxes. A node that died takes a
    while to be counted dead, and a connection that broke may come back: an agent
    unreachable on a live node is waited for a while, and may live on."""
    if ex.actor_init_failed:  # the node cannot make sandboxes as the server does
        why = str(ex).strip().splitlines()[-1]
        return f"the sandbox agent on node {node} could not start: {why}", True
    checks = _LOST_CHECKS if isinstance(ex, ray.exceptions.ActorUnavailableError) else 1
    for check in range(checks):
        if not await anyio.to_thread.run_sync(_alive, node):
            return f"node lost: {node}; the sandbox ended with it", True
        if check + 1 < checks:
            await anyio.sleep(_LOST_SECONDS / _LOST_CHECKS)
    if checks == 1:
        return f"the sandbox agent on node {node} died; the sandbox ended with it", True
    return f"lost touch with the sandbox agent on node {node}; told it to stop there", False


async def _close(agent: AgentHandle) -> None:
    try:
        await answer(agent.aclose.remote())
    except ray.exceptions.RayError as ex:
        logger.warning("a node's agent did not end its sandboxes: %s", ex)


def _address(node: str) -> str:
    """The address of `node` in the cluster (blocks)."""
    for found in ray.nodes():  # type: ignore[no-untyped-call]
        if found["NodeID"] == node:
            return str(found["NodeManagerAddress"])
    raise SandboxError(f"node {node} has left the Ray cluster")


def _alive(node: str) -> bool:
    """Whether the cluster still counts `node` among its live nodes (blocks)."""
    return node in live_nodes()


def live_nodes() -> set[str]:
    """The ids of the cluster's live nodes (blocks)."""
    return {
        str(n["NodeID"])
        for n in ray.nodes()  # type: ignore[no-untyped-call]
        if n["Alive"]
    }
