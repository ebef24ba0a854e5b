"""The Ray engine (extra `ray`): each sandbox placed on a node of a Ray cluster, made there by
the node's agent."""
