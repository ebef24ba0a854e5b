"""Which sizes the Ray engine holds back, from the cluster's nodes (stood in for here): a size
that one node can hold even where no node holds both its CPUs and memory alone is asked of
Ray; one that none can hold waits, naming the largest node."""

from __future__ import annotations

from inspect_swarm.server.engines._command import Capacity
from inspect_swarm.server.engines.ray._engine import _unfit
from inspect_swarm.server.model._types import GIB, Size

HEAD = Capacity(0, 4 * GIB)  # no CPUs: sandboxes never go there


def test_a_size_one_node_can_hold_is_asked_of_ray() -> None:
    nodes = [HEAD, Capacity(4, 2 * GIB), Capacity(2, 8 * GIB)]
    assert _unfit(nodes, Size(2, 8)) is None
    assert _unfit(nodes, Size(4, 2)) is None


def test_a_size_no_node_can_hold_waits_naming_the_largest() -> None:
    # CPUs on one node and memory on another are no room for a sandbox that needs both
    nodes = [HEAD, Capacity(4, 2 * GIB), Capacity(2, 8 * GIB)]
    assert _unfit(nodes, Size(4, 4)) == (
        "the largest node of the Ray cluster (4 CPUs, 2 GiB of memory) cannot hold a sandbox "
        "of 4 vCPUs and 4 GiB"
    )
    assert _unfit([HEAD, Capacity(1, 8 * GIB)], Size(2, 1)) == (
        "the largest node of the Ray cluster (1 CPU, 8 GiB of memory) cannot hold a sandbox "
        "of 2 vCPUs and 1 GiB"
    )


def test_a_cluster_of_no_worker_holds_nothing() -> None:
    assert _unfit([HEAD], Size(1, 1)) == (
        "the largest node of the Ray cluster (0 CPUs, 4 GiB of memory) cannot hold a sandbox "
        "of 1 vCPU and 1 GiB"
    )
