"""Metrics (`get_metrics`) with the unmodified e2b SDK, sampled from the sandbox's cgroups."""

from __future__ import annotations

import pytest
from e2b import Sandbox

pytestmark = pytest.mark.usefixtures("e2b_env")


def test_metrics_are_sampled_over_the_sandboxs_life_and_filtered_by_time() -> None:
    sbx = Sandbox.create()
    try:
        # 64 MiB on its disk, then CPU busy past the next sample (taken every 5 s)
        sbx.commands.run(
            "head -c 67108864 /dev/zero > blob; timeout 6 sh -c 'while :; do :; done' || true"
        )
        metrics = sbx.get_metrics()
        assert len(metrics) >= 2
        assert [m.timestamp for m in metrics] == sorted(m.timestamp for m in metrics)
        last = metrics[-1]
        assert (last.cpu_count, last.mem_total) == (2, 1024**3)
        assert 0 < last.mem_used <= last.mem_total and last.mem_cache <= last.mem_used
        assert 64 * 1024**2 <= last.disk_used < last.disk_total
        assert max(m.cpu_used_pct for m in metrics[1:]) > 0
        later = sbx.get_metrics(start=metrics[-1].timestamp)
        assert [m.timestamp for m in later] == [metrics[-1].timestamp]
        assert sbx.get_metrics(end=metrics[0].timestamp)[-1].timestamp == metrics[0].timestamp
    finally:
        sbx.kill()
