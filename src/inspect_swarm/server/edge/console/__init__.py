"""The swarm server's web console: runs, long-lived sandboxes and the lease in a browser, on a
port of its own, showing what the signed-in key reaches through the API."""

from ._app import create_console

__all__ = ["create_console"]
