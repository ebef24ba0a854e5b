"""Where the Ray engine's snapshots are: each one is kept by the agent of the node its sandbox
ran on, in a directory of the server's on that node (`engines.ray._node`), and a sandbox made
from it is placed on that node. A node that left the cluster took its snapshots with it.

Snapshots stay on their node rather than follow the sandbox made from them: copying one to
another node would send all its files through the cluster for each boot, where placing the
boot by it costs nothing (and a node full for now only makes it wait).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection

import anyio
import ray
import ray.exceptions

from ._calls import AgentHandle
from ._place import live_nodes

logger = logging.getLogger(__name__)


class NodeSnapshots:
    """The node of each snapshot of the server's, and which nodes are alive."""

    def __init__(self) -> None:
        self._nodes: dict[str, str] = {}
        self._alive: set[str] = live_nodes()
        self._learned = threading.Event()
        """Set once the nodes have said which snapshots they hold (as the server starts):
        until then, one the server has not seen made is not counted lost."""

    def saved(self, snapshot_id: str, node: str) -> None:
        """A sandbox on `node` saved its files as `snapshot_id` there."""
        self._nodes[snapshot_id] = node

    def node(self, snapshot_id: str) -> str | None:
        """The node holding a snapshot (None for one the server never learned of)."""
        return self._nodes.get(snapshot_id)

    def forget(self, snapshot_id: str) -> str | None:
        """Stop tracking a snapshot; the node that held it."""
        return self._nodes.pop(snapshot_id, None)

    def look(self) -> None:
        """See which nodes are alive now (blocks)."""
        self._alive = live_nodes()

    def left(self, node: str) -> None:
        """`node` was found to have left the cluster (before the next look)."""
        self._alive.discard(node)

    def lost(self, snapshot_id: str) -> str | None:
        """Why a snapshot is gone, as the cluster was last seen (None while its node is
        alive)."""
        node = self._nodes.get(snapshot_id)
        if node is None:
            return "no node of the Ray cluster holds it" if self._learned.is_set() else None
        if node not in self._alive:
            return f"it was kept on node {node}, which has left the Ray cluster"
        return None

    def keep(self, agents: Collection[tuple[str, AgentHandle]], kept: Collection[str]) -> None:
        """Have each node's agent remove every snapshot but `kept` (and those of nodes that
        left the cluster), and learn where those that are left are, on a thread of its own:
        the agents take a while to start, which the server's start does not wait for."""
        learn = threading.Thread(target=self._keep, args=(agents, kept), daemon=True)
        learn.start()

    async def learned(self) -> None:
        """Return once the nodes have said which snapshots they hold."""
        if not self._learned.is_set():
            await anyio.to_thread.run_sync(self._learned.wait)

    def _keep(self, agents: Collection[tuple[str, AgentHandle]], kept: Collection[str]) -> None:
        try:
            self.look()
            alive = sorted(self._alive)
            for node, agent in agents:
                try:
                    held: list[str] = ray.get(agent.keep_snapshots.remote(list(kept), alive))
                except ray.exceptions.RayError as ex:
                    logger.warning("node %s did not list its snapshots: %s", node, ex)
                    continue
                for snapshot_id in held:
                    self._nodes.setdefault(snapshot_id, node)
        finally:
            self._learned.set()
