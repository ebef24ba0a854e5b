"""Members with sandboxes of their own, the shared-memory board, and a comparator that checks.

A port of a task that shared a board through `memory(instance=...)`: the members' only channel
is the shared-memory board, and each works in a sandbox of its own (`agent-1`, `agent-2`),
where it leaves its answer in `answer.txt`. The `comparator` service mounts each member's
working volume read-only at `/answers/<member>` (proof_swarm.yaml), so it checks the answer a
member left in its own sandbox without any member reaching another's files. Members reach the
comparator by name, through the `check` tool. The member builder checks the answer the member
left when its agent returns, not only the checks it asked for, since a member could pass a
check and then change its answer; the scorer checks what every member left, so a member
stopped before it submitted still counts.

The same task runs on Docker (`-T provider=docker`, one container per service) and offline on
the `multidir` sandbox, where each service is a private working directory on this machine and
the volumes are shared directories:

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

from inspect_swarm import member, shared_memory, swarm, swarm_on_continue, swarm_tools

HERE = Path(__file__).parent

N = 8051

PROMPT = (
    f"Find a factor of {N} other than 1 and {N}. Write it alone in answer.txt in your working "
    "directory, check it with the check tool, and submit it. Share what you rule out on the "
    "shared memory board, so that nobody tries it twice."
)

# exits 0 only for a proof: the file it is given holds a factor of N other than 1 and N
VERIFY = f"""
import sys
n = {N}
try:
    text = open(sys.argv[1]).read().strip()
except OSError:
    sys.exit("no answer.txt")
if not text.isdigit():
    sys.exit(f"{{text!r}} is not a whole number")
if not (1 < int(text) < n and n % int(text) == 0):
    sys.exit(f"{{text}} is not a factor of {{n}} other than 1 and {{n}}")
print(f"{{text}} divides {{n}}")
"""


async def run_check(member_sandbox: str) -> tuple[bool, str]:
    """Check the answer a member left in its sandbox, with the comparator: whether it is a
    proof, and why. The comparator's working directory is /answers, where each member's
    volume is mounted read-only."""
    result = await sandbox("comparator").exec(
        ["python3", "-c", VERIFY, f"{member_sandbox}/answer.txt"], timeout=60
    )
    return result.success, result.stdout.strip() or result.stderr.strip()


@tool
def check(member_sandbox: str) -> Tool:
    async def execute() -> str:
        """Check the answer in your answer.txt with the comparator."""
        proved, why = await run_check(member_sandbox)
        return f"{'PROOF' if proved else 'NOT A PROOF'}: {why}"

    return execute


@agent
def proof_solver(member_sandbox: str) -> Agent:
    """A `react()` member on the board that returns normally only when the answer it left in
    its sandbox (`member_sandbox`) is a proof."""
    inner = react(
        tools=[bash(timeout=60), check(member_sandbox), swarm_tools()],
        on_continue=swarm_on_continue(),
    )

    async def execute(state: AgentState) -> AgentState:
        state = await inner(state)
        proved, why = await run_check(member_sandbox)
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
        passed = [m["name"] for m in record["members"] if (await run_check(m["sandbox"]))[0]]
        return Score(value=CORRECT if passed else INCORRECT, metadata={"passed": passed})

    return score


@task
def proof_swarm(k: int = 2, provider: str = "multidir") -> Task:
    """Members named `agent-1` to `agent-k`, each in the sandbox of its name.

    Args:
        k: Members; proof_swarm.yaml has services (and volumes) for two.
        provider: The sandbox provider that runs proof_swarm.yaml: `multidir` or `docker`.
    """
    return Task(
        dataset=[Sample(input=PROMPT)],
        solver=swarm(
            members=[
                member(
                    proof_solver,
                    {"member_sandbox": f"agent-{i}"},
                    name=f"agent-{i}",
                    sandbox=f"agent-{i}",
                    visible_sandboxes=["comparator"],
                )
                for i in range(1, k + 1)
            ],
            controller=until_proved(),
            channels=[shared_memory()],
        ),
        scorer=any_member_proved(),
        sandbox=(provider, str(HERE / "proof_swarm.yaml")),
    )
