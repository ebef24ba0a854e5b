"""Run a swarm of agents on one sample of an Inspect task.

A swarm is an Inspect agent: pass `swarm()` as a task's solver, and the task's scorer scores
the swarm's answer. Members run at the same time, each in its own timeline; a controller
decides who starts and when the swarm is done; channels decide how members share
information; a budget caps what the swarm spends. The swarm records what it did in the sample
store: `inspect_swarm:result`, `inspect_swarm:ledger` and `inspect_swarm:metrics`.
"""

import lazy_loader

# Each public name is imported on first use, from the imports of `__init__.pyi`, so that the
# swarm server and its client (`inspect_swarm.server`) start without importing inspect_ai.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
