"""A controller's check of a member's submission: the task's scorer, or one it names, run on the
member's conversation outside the member, as a logged intermediate score."""

from copy import copy

from inspect_ai._util.registry import has_registry_params, registry_params
from inspect_ai.event import ScoreEvent
from inspect_ai.log import transcript
from inspect_ai.scorer import Score, Scorer
from inspect_ai.scorer._score import _scorers
from inspect_ai.scorer._scorer import unique_scorer_name
from inspect_ai.solver._task_state import sample_state

from ._member_run import MemberRun
from ._sandbox import member_sandbox


async def check_submission(m: MemberRun, check: Scorer | None) -> Score | None:
    """Score the member's latest output with `check`, or the task's first scorer."""
    scorers = _scorers.get(None)
    scorer = check if check is not None else (scorers[0] if scorers else None)
    current = sample_state()
    if scorer is None:
        raise RuntimeError(
            f"SwarmControl.verify(): member {m.name!r} cannot be checked: the task has no "
            "scorer to check with. Give the task a scorer, or pass the check, "
            "e.g. verified(check=match())."
        )
    if current is None:
        raise RuntimeError(
            f"SwarmControl.verify(): member {m.name!r} cannot be checked outside a sample of "
            "a task. Run the swarm as a task's solver."
        )
    state = copy(current)
    state.messages = list(m.messages)
    if m.output is not None:
        state.output = m.output
    # the member's sandbox is the default, as it is for a check in the member's own loop
    with member_sandbox(m.spec):
        score = await scorer(state, current.target)
    if score is not None:
        transcript()._event(
            ScoreEvent(
                score=score,
                target=current.target.target,
                intermediate=True,
                scorer=unique_scorer_name(scorer, []),
                scorer_args=registry_params(scorer) if has_registry_params(scorer) else None,
            )
        )
    return score
