"""Run the getting-started swarm on the offline scripted model and show what it did.

The same eval from the command line:

    inspect eval examples/getting_started.py --model scripted/demo \
        -M script=examples/getting_started.yaml -T k=3

Open the log it leaves with `inspect view --log-dir logs` (INSPECT_LOG_DIR sets another).
"""

import os
import sys
from pathlib import Path

from inspect_ai import eval

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from getting_started import getting_started  # noqa: E402

from inspect_swarm.scripted import scripted_model  # noqa: E402

_RULE = {"first": "the first submission", "last": "the last submission"}
"""How the swarm's answer rule chose the answer, in words."""


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    [log] = eval(
        getting_started(k=k),
        model=scripted_model(HERE / "getting_started.yaml", name="demo"),
        log_dir=os.environ.get("INSPECT_LOG_DIR", str(HERE.parent / "logs")),
        display="none",
    )
    print(f"eval {log.status}: {log.location}")
    for sample in log.samples or []:
        record = sample.store["inspect_swarm:result"]
        score = sample.scores["match"].value if sample.scores else None
        final = record["final"]
        print(
            f"\nsample {sample.id!r}: answer {sample.output.completion!r} from {final['member']} "
            f"({_RULE.get(final['mode'], 'chosen by the controller')}), score {score}"
        )
        print(f"  {'MEMBER':<10} {'STATE':<8} {'STATUS':<12} {'TIME':>7}")
        for m in record["members"]:
            print(f"  {m['name']:<10} {m['state']:<8} {m['status']:<12} {m['time']:>6.2f}s")
        ledger = sample.store["inspect_swarm:ledger"]
        print(f"  stop: {ledger['stop_reason']}, cost ${ledger['swarm']['cost']:.6f}")
    if log.results:
        accuracy = log.results.scores[0].metrics["accuracy"].value
        print(
            f"\naccuracy {accuracy:.2f}. View the log with: .venv/bin/inspect view --log-dir logs"
        )


if __name__ == "__main__":
    main()
