"""How long `inspect-swarm show` takes on a log directory of 100 swarm samples of 8 members.

Builds the logs once (on the scripted model: each member writes to the shared-memory board,
thinks, reads the board and submits, so each sample has some 250 KB of events), then times
the command as a user runs it, start-up included, and the two ways to read the swarms'
records: the reader `show` uses, which streams each sample up to its records, and inspect_ai's
`read_eval_log_sample(exclude_fields=...)`, which still parses every event.

    .venv/bin/python benchmarks/show_logs.py [--log-dir DIR] [--repeat 5]

The target: under 2 s for the command.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLES = 100
MEMBERS = 8
BOARD = "/shared_memory/notes.md"


def build(log_dir: Path) -> None:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes

    from inspect_swarm import Budget, member, shared_memory, swarm, swarm_react
    from inspect_swarm.scripted import scripted_model

    steps = [
        {"tool": "shared_memory", "arguments": {"command": "append", "path": BOARD,
                                                "append_text": "a note " * 20}},
        {"text": "Thinking about it " * 30},
        {"tool": "shared_memory", "arguments": {"command": "view", "path": BOARD}},
        {"submit": "42"},
    ]  # fmt: skip
    task = Task(
        dataset=[Sample(input=f"Question {i}: 6 x 7?", target="42", id=i) for i in range(SAMPLES)],
        solver=swarm(
            member(swarm_react, name="w", count=MEMBERS),
            channels=[shared_memory()],
            budget=Budget(tokens=10**7),
        ),
        scorer=includes(),
    )
    [log] = eval(
        task,
        model=scripted_model({"members": {"*": steps}}),
        log_dir=str(log_dir),
        display="none",
        max_samples=20,
    )
    assert log.status == "success", log.error


def time_command(log_dir: Path, repeat: int) -> list[float]:
    script = str(Path(sys.executable).parent / "inspect-swarm")
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([script, "show", str(log_dir)], capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == SAMPLES
    return times


def time_readers(log_dir: Path) -> tuple[float, float]:
    from inspect_ai.log import list_eval_logs, read_eval_log_sample_summaries
    from inspect_ai.log import read_eval_log_sample as read_sample

    from inspect_swarm.analysis._read import read_swarm_samples

    start = time.perf_counter()
    assert len(read_swarm_samples(log_dir)) == SAMPLES
    streamed = time.perf_counter() - start
    [info] = list_eval_logs(str(log_dir))
    start = time.perf_counter()
    for s in read_eval_log_sample_summaries(info.name):
        read_sample(info.name, s.id, s.epoch, exclude_fields={"events", "messages"})
    return streamed, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", type=Path, help="reuse (or build once into) this directory")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        log_dir = args.log_dir or Path(scratch)
        if not list(log_dir.glob("*.eval")):
            print(f"building {SAMPLES} samples of {MEMBERS} members in {log_dir} ...")
            build(log_dir)
        size = sum(p.stat().st_size for p in log_dir.glob("*.eval")) / 1e6
        times = time_command(log_dir, args.repeat)
        streamed, api = time_readers(log_dir)
        print(f"log: {size:.1f} MB compressed, {SAMPLES} samples of {MEMBERS} members")
        print(
            f"inspect-swarm show DIR: best {min(times):.2f} s, median {sorted(times)[len(times) // 2]:.2f} s (target < 2 s)"
        )
        print(f"records, streamed to the store: {streamed:.2f} s")
        print(f"records, read_eval_log_sample(exclude_fields=...): {api:.2f} s")


if __name__ == "__main__":
    main()
