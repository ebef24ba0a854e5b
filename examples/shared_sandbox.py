"""bash() members in one shared sandbox, with the default `filesystem` channel.

The members build one script together in the sample's sandbox: they share files in /shared,
append notes to /shared/notes.md (which the sample's `files` creates) and keep their own work
in /scratch/<member>. Every member runs to its end, and the scorer runs the script they left.
The sandbox is compose.yaml's one service: a container under Docker (`-T provider=docker`),
or offline an isolated sandbox on a swarm server this process starts (`swarm_server`, which
needs root for its isolation):

    inspect eval examples/shared_sandbox.py --model scripted/demo \
        -M script=examples/shared_sandbox.yaml
"""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import TaskState
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

from inspect_swarm import leaderless, member, swarm

HERE = Path(__file__).parent

PROMPT = (
    "Write /shared/solution.sh, a bash script that prints the number of planets in the solar "
    "system that are not dwarf planets, plus one. Check each other's work."
)


@scorer(metrics=[accuracy()])
def script_works() -> Scorer:
    """Run the script the members left, and compare what it prints with the target."""

    async def score(state: TaskState, target: Target) -> Score:
        result = await sandbox().exec(["bash", "/shared/solution.sh"])
        answer = result.stdout.strip()
        return Score(value=CORRECT if answer == target.text else INCORRECT, answer=answer)

    return score


@task
def shared_sandbox(k: int = 3, provider: str = "swarm_server") -> Task:
    """`react-1` to `react-k` in one sandbox.

    Args:
        k: Members.
        provider: The sandbox provider that runs compose.yaml: `swarm_server` or `docker`.
    """
    return Task(
        dataset=[Sample(input=PROMPT, target="9", files={"/shared/notes.md": ""})],
        solver=swarm(
            members=member(react, args={"tools": [bash(timeout=60)]}, count=k),
            controller=leaderless(stop_on_submission=False),
        ),
        scorer=script_works(),
        sandbox=(provider, str(HERE / "compose.yaml")),
        token_limit=1_000_000,
    )
