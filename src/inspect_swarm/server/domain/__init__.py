"""The rules of the server (`_server.SwarmServer`): runs, long-lived sandboxes, the lease and
its keys. No HTTP: a refusal is a domain error that each transport answers in its own shape."""
