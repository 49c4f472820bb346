"""A sequential sweep's look at its judging seeds: every comparison with the baseline as a Decision.

`decisions(...)` runs compare with a margin and sequential verdicts (sequential.py's confidence
sequences) on the runs loaded so far; a sweep calls it after each batch of judging seeds
(cli/judging.py). It sits above compare.py, which sits above sequential.py. Pure pandas: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from activation_bench.analysis.metrics import ACCURACY, FLOOR, Metric
from activation_bench.analysis.sequential import OPEN, SequentialSpec
from activation_bench.analysis.verdicts import Margin


@dataclass(frozen=True)
class Decision:
    """One comparison with the baseline, as a sequential sweep reads it after a batch of seeds.

    group: the candidate group's values of the group columns (e.g. {"activation": "gelu"}, and the
    other varying keys such as {"data": "digits"}); tuned: its chosen values of the tuned keys ({}
    without tune); baseline: "KEY=VALUE". verdict: better | worse | equivalent | undecided. n: the
    pairs (judging seeds both runs finished) it used. estimate, lo, hi: the mean paired effect and its
    anytime-valid interval, as a geometric-mean ratio on a loss or in percentage points on an accuracy.
    p: anytime-valid p-value of no difference, Holm-corrected across the comparisons. stopped:
    "decided", "max seeds" or "open" (train more seeds for it). decided_at: the fewest pairs at which
    it was already decided (None: undecided)."""

    group: dict[str, str]
    tuned: dict[str, str]
    baseline: str
    verdict: str
    n: int
    estimate: float
    lo: float
    hi: float
    p: float
    stopped: str
    decided_at: int | None

    @property
    def done(self) -> bool:
        """No more judging seeds needed for this comparison."""
        return self.stopped != OPEN


def decisions(loaded: object, metric: Metric | str, by: Sequence[str] | None, baseline: str | None, loss: str,
              tune: object | None, margin: Margin | str | float, alpha: float = 0.05, max_seeds: int | None = None,
              pair_by: Sequence[str] | None = None, floor: float = FLOOR) -> list[Decision]:
    """Every comparison with the baseline judged anytime-validly on the runs loaded so far.

    Call it after each batch of judging seeds with the sweep's runs (`loading.load(paths, loss)`),
    the study's compare arguments (metric, by, baseline, loss, tune: a tune.TuneSpec or None, as
    compare takes them) and its margin (a verdicts.Margin, or the --margin text). alpha is the error
    rate of all comparisons together, at every look; max_seeds the sweep's --judge-seeds-max (the
    judging seeds a comparison may use). Returns one Decision per non-baseline group, in compare's
    row order; a group whose Decision is done needs no more judging seeds, the baseline's group
    needs them while any other is open. The numbers are those `compare --margin X --sequential`
    prints on the same runs, so the verdict read at the stop is the one the table shows.

    With `tune`, give tune_seeds explicitly (the tuning seeds must not move as judging seeds are
    added: the default, a third of the seeds, would). Write `record_text(...)` into the sweep's
    folder as RECORD_FILE, so `compare` shows these verdicts without --sequential."""
    from activation_bench.analysis.compare import compare
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.verdicts import parse_margin

    if not isinstance(margin, Margin):
        margin = parse_margin(margin, accuracy=is_accuracy(loss))
    res = compare(loaded, metric, by, baseline, loss, floor, tune=tune, pair_by=pair_by,  # type: ignore[arg-type]
                  margin=margin, sequential=SequentialSpec(max_seeds), alpha=alpha)
    return table_decisions(res)


def table_decisions(res: object) -> list[Decision]:
    """The Decisions of a CompareResult made with margin and sequential."""
    t = res.table  # type: ignore[attr-defined]
    acc = res.scale == ACCURACY  # type: ignore[attr-defined]
    lo_c, hi_c = ("verdict_lo_pp", "verdict_hi_pp") if acc else ("verdict_ratio_lo", "verdict_ratio_hi")
    out = []
    for _, r in t[~t["is_baseline"].fillna(False).astype(bool)].iterrows():
        at = r["decided_at"]
        out.append(Decision(
            group={c: str(r[c]) for c in res.group_cols},  # type: ignore[attr-defined]
            tuned={k: str(r[k]) for k in res.tuned_keys},  # type: ignore[attr-defined]
            baseline=str(r["baseline"]), verdict=str(r["verdict"]), n=int(r["seeds_used"]),
            estimate=float(r["diff_pp"] if acc else r["ratio"]), lo=float(r[lo_c]), hi=float(r[hi_c]),
            p=float(r["p_anytime_holm"]), stopped=str(r["stopped"]), decided_at=None if pd.isna(at) else int(at)))
    return out
