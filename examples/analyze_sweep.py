"""Score and realized cost per arm of a budget sweep (docs: Analysis > Samples dataframe).

    python examples/analyze_sweep.py [LOG_DIR]    # default: logs/budget_sweep

Compare arms on the cost the logs record, not on the caps. Arms with an incomplete ledger (a
cancelled member, an unpriced model, ...) report a lower bound of their cost.
"""

import sys
from pathlib import Path

from inspect_ai.analysis import EvalColumn, SampleSummary, samples_df
from inspect_ai.scorer import value_to_float

from inspect_swarm.analysis import SwarmColumns


def main(log_dir: str) -> None:
    arm = [
        EvalColumn("k", path="eval.task_args.k"),
        EvalColumn("budget", path="eval.task_args.budget"),
        EvalColumn("split", path="eval.task_args.split"),
    ]
    df = samples_df(log_dir, columns=arm + SampleSummary + SwarmColumns, quiet=True)
    df = df[~df["swarm_resumed"].astype(bool)]
    df["score"] = df["score_match"].map(value_to_float(), na_action="ignore")
    table = df.groupby(["k", "budget", "split"]).agg(
        samples=("score", "size"),
        score=("score", "mean"),
        cost=("swarm_cost", "mean"),
        cost_cap=("swarm_cost_cap", "mean"),
        complete=("swarm_complete", "mean"),
    )
    print(table.to_string(float_format=lambda x: f"{x:.4f}"))


if __name__ == "__main__":
    default = Path(__file__).parent.parent / "logs" / "budget_sweep"
    main(sys.argv[1] if len(sys.argv) > 1 else str(default))
