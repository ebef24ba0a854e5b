"""Engines run sandboxes for the domain: the protocol it uses, the command logic every engine
shares, the engine of this machine (`_local`) and the Ray engine (`ray`, extra `ray`)."""
