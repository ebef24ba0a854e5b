"""An offline scripted model for testing swarms (and any other Inspect task).

The model `scripted/<name>` returns, for each member of a swarm, the steps its
script lists, in order: tool calls such as `submit`, text, stop reasons, delays, holds and
errors, with fixed token usage and a price. Each (sample, epoch, member) has its own
step counter, and so does each run of a member's nested loop that the script routes
(`member/loop`, such as `deep/general` for a deepagent's background subagents), so a run
is deterministic whatever the interleaving, and nothing reaches the network.

From the command line: `inspect eval task.py --model scripted/demo -M script=script.yaml`.
From Python: `eval(task, model=scripted_model({"members": {"*": [{"submit": "42"}]}}))`.
"""

from ._model import ScriptError, scripted_model
from ._script import AfterStep, Script, ScriptPrice, ScriptUsage, Step, StepUsage

__all__ = [
    "AfterStep",
    "Script",
    "ScriptError",
    "ScriptPrice",
    "ScriptUsage",
    "Step",
    "StepUsage",
    "scripted_model",
]
