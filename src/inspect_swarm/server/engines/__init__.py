"""Engines run sandboxes for the domain: the protocol it uses, the scheduler every engine
shares, the command logic every slot runner shares, and the runners themselves: this machine's
(`_local`) and a Ray cluster's (`ray`, extra `ray`)."""
