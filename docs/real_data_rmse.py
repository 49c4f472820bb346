"""Mean test RMSE at the early-stopping epoch, in each target's own units, per task and activation,
from the study's summary.json files (docs/real_data_study.sh). Prints a markdown table.

    python docs/real_data_rmse.py runs/real-data-study
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main(root: Path) -> None:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in sorted(root.glob("*/*/summary.json")):
        s = json.loads(path.read_text())
        if s.get("status") != "complete" or s.get("early_stop_test_rmse") is None:
            continue
        labels = s["labels"]
        task = labels.get("data.fn") or labels.get("data") or path.parent.parent.name
        values[(task, labels["activation"])].append(s["early_stop_test_rmse"])
    acts = sorted({a for _, a in values})
    tasks = list(dict.fromkeys(t for t, _ in values))
    print("| task | " + " | ".join(acts) + " |")
    print("| --- | " + " | ".join("---:" for _ in acts) + " |")
    for t in tasks:
        cells = [f"{statistics.mean(values[(t, a)]):.4g}" if values[(t, a)] else "" for a in acts]
        print(f"| {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/real-data-study"))
