"""`python -m inspect_swarm.cli`: the `inspect-swarm` command."""

from ._main import run

run()
