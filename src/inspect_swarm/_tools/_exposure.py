"""`record_exposure()`: exposure evidence from model inputs that an experiment observes itself."""

from collections.abc import Sequence

from inspect_ai.model import ChatMessage

from .._context import current_member, current_swarm


def record_exposure(messages: Sequence[ChatMessage]) -> list[str]:
    """Record which records the calling member was shown that reached these model inputs.

    Under an activation policy the swarm checks each successful model call of a member
    against what it was shown (a record it read, a notice) and records `exposed` evidence.
    An experiment whose own model-side filters change the input after the swarm sees it
    calls this with the messages that reached the model, from inside the member (its model
    wrapper, say): each record found is recorded as `exposed` with `observed: manual`. With
    `member(..., exposure="manual")` the swarm leaves that member's model calls unchecked, so
    its evidence comes from these calls alone, and its coverage is `complete` only once they
    observed as many inputs as it made successful model calls. Outside a policy it records
    nothing.

    Args:
        messages: The input messages as they reached the model.

    Returns:
        The ids of the records found, such as `m-3`.

    Raises:
        RuntimeError: It is called outside a member of a running swarm.
    """
    swarm = current_swarm()
    if swarm is None or current_member() is None:
        raise RuntimeError(
            "record_exposure(): no swarm member is running here. Call it inside a member of a "
            "running swarm, where the member's model inputs are seen."
        )
    return swarm.record_exposure(messages)
