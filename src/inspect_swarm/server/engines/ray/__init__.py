"""The Ray engine (extra `ray`): the shared scheduler over a runner that places each sandbox
on a node of a Ray cluster, where the node's agent makes it."""
