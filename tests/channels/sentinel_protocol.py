"""The spec's `no_secrets_on_board` Inspect Sentinel protocol, as written."""

from inspect_sentinel import (
    BeforeToolCall,
    Context,
    Decision,
    Escalations,
    Protocol,
    call_text,
    find_words,
    protocol,
)


@protocol
def no_secrets_on_board() -> Protocol:
    """Reject shared_memory writes that mention a credential."""

    async def decide(
        context: Context, step: BeforeToolCall, escalations: Escalations
    ) -> Decision | None:
        if step.call.function != "shared_memory":
            return None
        if step.call.arguments.get("command") == "view":
            return None
        used = find_words(call_text(step.call), ["password", "api_key", "token"])
        if used:
            return Decision.reject(
                f"write mentions {', '.join(used)}",
                message="Credentials may not be written to shared memory.",
            )
        return Decision.proceed()

    return decide
