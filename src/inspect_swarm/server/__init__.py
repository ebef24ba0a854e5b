"""The swarm server: the Swarms API, long-lived and E2B-compatible sandboxes on this machine
or a Ray cluster.

Its floors, top-down: `edge` (HTTP: routes, auth, limits, the E2B surface), `domain` (the
rules), `engines` (running sandboxes: here, or on Ray), `records` (the one write path and its
SQLite store), and at the bottom `model` (the shared types, errors and input rules) and
`sandboxes` (isolation on this machine). `_serve` assembles them. Start it with
`inspect-swarm server`; talk to it with `inspect_swarm.client`. It needs the `server` extra.
"""
