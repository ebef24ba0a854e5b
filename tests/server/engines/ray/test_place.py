"""What the server makes of losing a node's agent (`Agents.lost`), with the cluster's answer
about its node stood in for: every sandbox of the agent learns it from one look, even when
the first to ask is cancelled midway."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest
import ray.exceptions

from inspect_swarm.server.engines.ray import _place as _ray_place
from inspect_swarm.server.engines.ray._place import Agents
from inspect_swarm.server.sandboxes._isolation import IsolationConfig

pytestmark = pytest.mark.anyio

AGENT = object()  # a stand-in for the agent's actor handle


class Cluster:
    """The cluster's answers to "is this node alive?": alive for the first `alive` asks."""

    def __init__(self, alive: int) -> None:
        self.alive = alive
        self.asked = 0
        self.looked = threading.Event()

    def __call__(self, node: str) -> bool:
        self.asked += 1
        self.looked.set()
        return self.asked <= self.alive


def unreachable() -> ray.exceptions.RayActorError:
    return ray.exceptions.ActorUnavailableError("RPC error: Socket closed", None)


async def test_the_sandboxes_of_a_lost_agent_share_one_look_at_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(alive=3)  # counted dead at the fourth look
    monkeypatch.setattr(_ray_place, "_alive", cluster)
    monkeypatch.setattr(_ray_place, "_LOST_SECONDS", 1.0)
    agents = Agents(IsolationConfig(tmp_path))
    found = []

    async def sandbox() -> None:
        found.append(await agents.lost("node-a", AGENT, unreachable()))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(sandbox)
    assert found == [("node lost: node-a; the sandbox ended with it", True)] * 5
    assert cluster.asked == 4


async def test_a_live_node_whose_agent_is_unreachable_may_still_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ray_place, "_alive", Cluster(alive=10**6))
    monkeypatch.setattr(_ray_place, "_LOST_SECONDS", 0.2)
    agents = Agents(IsolationConfig(tmp_path))
    with anyio.fail_after(10):
        why, ended = await agents.lost("node-a", AGENT, unreachable())
    assert (why, ended) == (
        "lost touch with the sandbox agent on node node-a; told it to stop there",
        False,
    )
    # an agent that died on a live node took its sandboxes with it: one look says so
    with anyio.fail_after(10):
        died = await agents.lost("node-b", object(), ray.exceptions.ActorDiedError())
    assert died == ("the sandbox agent on node node-b died; the sandbox ended with it", True)


async def test_the_first_to_ask_cancelled_midway_leaves_the_rest_an_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(alive=6)
    monkeypatch.setattr(_ray_place, "_alive", cluster)
    monkeypatch.setattr(_ray_place, "_LOST_SECONDS", 1.0)
    agents = Agents(IsolationConfig(tmp_path))
    judge = anyio.CancelScope()
    found = []

    async def first() -> None:
        with judge:  # the first to ask looks at the cluster for every sandbox of the agent
            await agents.lost("node-a", AGENT, unreachable())

    async def sandbox() -> None:
        found.append(await agents.lost("node-a", AGENT, unreachable()))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await anyio.to_thread.run_sync(cluster.looked.wait)
            tg.start_soon(sandbox)
            await anyio.sleep(0.05)  # waiting for the first one's answer
            judge.cancel()
    assert judge.cancelled_caught
    assert found == [("node lost: node-a; the sandbox ended with it", True)]
