"""Run-time tools: what code inside a swarm calls to read it (`swarm_budget()`, the tools and
notices of its channels), through `current_swarm()`."""
