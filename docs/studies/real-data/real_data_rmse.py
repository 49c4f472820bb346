"""Mean test RMSE at the early-stopping epoch, in each target's own units, and the median
early-stopping epoch, per task and activation, from the study's summary.json files
(docs/studies/real-data/fixed-lr.yaml's sweeps). Prints two markdown tables; the study file cannot
(a study compares losses, not RMSE in each target's units).

    python docs/studies/real-data/real_data_rmse.py runs/real-data-study
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml


def main(root: Path) -> None:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    stops: dict[tuple[str, str], list[int]] = defaultdict(list)
    for path in sorted(root.glob("*/*/summary.json")):
        s = json.loads(path.read_text())
        if s.get("status") != "complete" or s.get("early_stop_test_rmse") is None:
            continue
        labels = s["labels"]
        data = yaml.safe_load((path.parent / "config.yaml").read_text())["data"]
        task = f"{data['fn'] if data['name'] == 'function' else data['name']}, {s['epochs']} epochs"
        values[(task, labels["activation"])].append(s["early_stop_test_rmse"])
        stops[(task, labels["activation"])].append(s["early_stop_epoch"])
    _table("mean test RMSE at the early-stopping epoch (the target's own units)", values,
           lambda v: f"{statistics.mean(v):.4g}")
    print()
    _table("median early-stopping epoch (of the epochs trained)", stops, lambda v: f"{statistics.median(v):g}")


def _table(title: str, values: dict, fmt) -> None:
    acts = sorted({a for _, a in values})
    tasks = list(dict.fromkeys(t for t, _ in values))
    print(f"**{title}**\n")
    print("| task | " + " | ".join(acts) + " |")
    print("| --- | " + " | ".join("---:" for _ in acts) + " |")
    for t in tasks:
        cells = [fmt(values[(t, a)]) if values[(t, a)] else "" for a in acts]
        print(f"| {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/real-data-study"))
