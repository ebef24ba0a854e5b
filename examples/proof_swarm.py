"""Per-member sandboxes with a comparator service that checks each member's answer.

Each member works in a sandbox of its own (`agent-1`, `agent-2`) and leaves its answer in
`answer.txt` there. The `comparator` service is in every member's `visible_sandboxes`: the
members reach it by name, through the `check` tool, and never reach each other's sandboxes.
The member builder checks the answer the member left when its agent returns, not only the
checks it asked for, since a member could pass a check and then change its answer. The
scorer checks what every member left, so a member stopped before it submitted still counts.

The comparator reads an answer that is passed to it, so the same task runs on Docker
(`-T provider=docker`, one container per service of proof_swarm.yaml) and offline on the
`multidir` sandbox, where each service is a private working directory on this machine:

    inspect eval examples/proof_swarm.py --model scripted/demo \
        -M script=examples/proof_swarm_script.yaml
"""

from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import Agent, AgentState, agent, react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import TaskState
from inspect_ai.tool import Tool, bash, tool
from inspect_ai.util import LimitExceededError, sandbox
from stop_on_proof import until_proved

from inspect_swarm import member, swarm

HERE = Path(__file__).parent

N = 8051

PROMPT = (
    f"Find a factor of {N} other than 1 and {N}. Write it alone in answer.txt in your "
    "working directory, check it with the check tool, then submit it."
)

# exits 0 only for a proof: a factor of N other than 1 and N
VERIFY = f"""
import sys
n = {N}
text = sys.stdin.read().strip()
if not text.isdigit():
    sys.exit(f"{{text!r}} is not a whole number")
if not (1 < int(text) < n and n % int(text) == 0):
    sys.exit(f"{{text}} is not a factor of {{n}} other than 1 and {{n}}")
print(f"{{text}} divides {{n}}")
"""


async def run_check(answer: str) -> tuple[bool, str]:
    """Check an answer with the comparator: whether it is a proof, and why."""
    result = await sandbox("comparator").exec(["python3", "-c", VERIFY], input=answer, timeout=60)
    return result.success, result.stdout.strip() or result.stderr.strip()


async def left_answer(member_sandbox: str | None = None) -> str:
    """The answer a member left in its sandbox (inside a member, its own is the default)."""
    try:
        return await sandbox(member_sandbox).read_file("answer.txt")
    except FileNotFoundError:
        return ""


@tool
def check() -> Tool:
    async def execute() -> str:
        """Check the answer in your answer.txt with the comparator."""
        proved, why = await run_check(await left_answer())
        return f"{'PROOF' if proved else 'NOT A PROOF'}: {why}"

    return execute


@agent
def proof_solver() -> Agent:
    """A `react()` member that returns normally only when the answer it left is a proof."""
    inner = react(tools=[bash(timeout=60), check()])

    async def execute(state: AgentState) -> AgentState:
        state = await inner(state)
        proved, why = await run_check(await left_answer())
        if not proved:
            # with no `source`, this ends only this member, as member_limit:custom
            raise LimitExceededError("custom", value=0, limit=0, message=f"no proof: {why}")
        return state

    return execute


@scorer(metrics=[accuracy()])
def any_member_proved() -> Scorer:
    """Check what every member left in its sandbox; correct when any is a proof."""

    async def score(state: TaskState, target: Target) -> Score:
        # the swarm's result record; task code reads it but never writes it
        record: dict[str, Any] = state.store.get("inspect_swarm:result")
        passed = [
            m["name"]
            for m in record["members"]
            if (await run_check(await left_answer(m["sandbox"])))[0]
        ]
        return Score(value=CORRECT if passed else INCORRECT, metadata={"passed": passed})

    return score


@task
def proof_swarm(k: int = 2, provider: str = "multidir") -> Task:
    """Members named `agent-1` to `agent-k`, each in the environment of its name.

    Args:
        k: Members; proof_swarm.yaml has services for two.
        provider: The sandbox provider that runs proof_swarm.yaml: `multidir`, `docker` or
            `swarm_server` (isolated sandboxes on the swarm server).
    """
    return Task(
        dataset=[Sample(input=PROMPT)],
        solver=swarm(
            members=[
                member(
                    proof_solver,
                    name=f"agent-{i}",
                    sandbox=f"agent-{i}",
                    visible_sandboxes=["comparator"],
                )
                for i in range(1, k + 1)
            ],
            controller=until_proved(),
            channels=[],
        ),
        scorer=any_member_proved(),
        sandbox=(provider, str(HERE / "proof_swarm.yaml")),
    )
