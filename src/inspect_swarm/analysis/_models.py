"""The ledger's models, as `inspect_swarm.analysis` exports them (defined with the records)."""

from .._contracts._schema import Calls, MemberLedger, Meter, SwarmLedger

__all__ = ["Calls", "MemberLedger", "Meter", "SwarmLedger"]
