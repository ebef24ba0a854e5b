"""`inspect-swarm replay`: the scripted model's script that replays a logged swarm.

It reads the log through inspect_ai, which it imports only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._logs import AddParser, add_output_option, add_sample_options


def add_replay_command(add: AddParser) -> None:
    """Add `replay` to the top-level commands."""
    replay = add(
        "replay",
        "write the scripted model's script that replays the swarms of a log, offline",
    )
    replay.add_argument("log", metavar="LOG", help="an .eval or .json log")
    add_sample_options(
        replay, "only this sample (default: every one)", "the epoch to replay of each sample"
    )
    add_output_option(replay, "the .yaml script to write")
    replay.set_defaults(handler=replay_log)


def replay_log(args: argparse.Namespace) -> int:
    """`replay`."""
    if not Path(args.log).is_file():
        raise ValueError(
            f"replay: {args.log} is not a log file; give one .eval or .json log (list a "
            "directory's samples with `inspect-swarm show DIR`)"
        )
    from inspect_ai.log import read_eval_log

    from ..scripted import replay_script

    log = read_eval_log(args.log)
    script = replay_script(log, sample=args.sample, epoch=args.epoch)
    task = log.eval.task_file or log.eval.task
    header = (
        f"# Replays {Path(args.log).name} (made with {log.eval.model}) on the scripted model:\n"
        f"#   inspect eval {task} --model scripted/replay -M script={args.output}\n"
    )
    args.output.write_text(header + script.to_yaml(), encoding="utf-8")
    members = sum(len(table) for table in script.samples.values())
    print(
        f"wrote {args.output}: {len(script.samples)} sample(s), {members} member script(s)",
        file=sys.stderr,
    )
    return 0
