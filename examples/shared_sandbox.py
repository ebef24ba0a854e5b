"""bash() members in one shared sandbox, with the default `filesystem` channel.

The spec's example runs in a Docker container. This version runs offline in a `local` sandbox
(a temporary directory on this machine), so the channel's directories are relative to it:

    inspect eval examples/shared_sandbox.py --model scripted/demo \
        -M script=examples/shared_sandbox.yaml
"""

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

from inspect_swarm import filesystem, leaderless, member, swarm

PROMPT = (
    "Write shared/solution.sh, a bash script that prints the number of planets in the solar "
    "system that are not dwarf planets, plus one. Check each other's work."
)


@scorer(metrics=[accuracy()])
def script_works():  # type: ignore[no-untyped-def]
    async def score(state: TaskState, target: Target) -> Score:
        result = await sandbox().exec(["bash", "shared/solution.sh"])
        answer = result.stdout.strip()
        return Score(value=CORRECT if answer == target.text else INCORRECT, answer=answer)

    return score


@task
def shared_sandbox(k: int = 3) -> Task:
    return Task(
        dataset=[Sample(input=PROMPT, target="9", files={"shared/notes.md": ""})],
        solver=swarm(
            members=member(react, args={"tools": [bash(timeout=60)]}, count=k),
            controller=leaderless(stop_on_submission=False),
            channels=[filesystem(shared="shared", scratch="scratch/{member}")],
        ),
        scorer=script_works(),
        sandbox="local",
        token_limit=1_000_000,
    )
