"""Isolated sandboxes on this machine: namespaces, a root, cgroups, disks, files as a user,
child processes, forwarding to the server, and each sandbox's PID 1."""
