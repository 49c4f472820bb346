"""Successive halving over candidate activations, rung by rung.

Rung r (1-based) of R trains its candidates for epochs * 2^(r-1) on seeds * 2^(r-1) seeds
(0, 1, ...) and keeps the best fraction `keep` for the next rung, so each rung costs about as much
as the first at keep = 1/4. The last rung is the judgement: the survivors of rung R-1 and the
baselines relu, gelu, silu and tanh, trained like rung R-1 but on `final_seeds` fresh seeds that
no selection used (they start after the largest selection seed). Select on some seeds, judge on
others: a screen's winner is optimistic until re-judged.

The selection score of a candidate in a rung (`--select-on`, SELECT_ON) is, by default (val_loss),
the geometric mean over its seeds of the final validation loss (the training loss where the task has
no validation split); a diverged or missing member scores infinity and lower is better. With val_acc
(classification tasks) it is the arithmetic mean over its seeds of the final validation accuracy (a
fraction in [0, 1]); a diverged or missing member scores -infinity and higher is better. Which way
is better comes from the analysis layer (`loading.higher_is_better`). Ties go to the candidate
drawn first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from activation_bench.analysis.loading import higher_is_better

BASELINES = ("relu", "gelu", "silu", "tanh")
SELECT_ON = ("val_loss", "val_acc")  # --select-on: validation numbers only, never the test split
# what a candidate's score is, for tables and the help (the rung's seeds follow it)
SCORE_TEXT = {"val_loss": "geometric mean of the final validation loss",
              "val_acc": "mean final validation accuracy"}
# candidates.csv's score column: `score` as before for val_loss; named for what it holds with val_acc,
# so that no reader sorts an accuracy as if it were a loss
SCORE_COLUMN = {"val_loss": "score", "val_acc": "mean_val_acc"}


@dataclass(frozen=True)
class Rung:
    number: int  # 1-based
    epochs: int
    seeds: tuple[int, ...]
    final: bool


def schedule(epochs: int, seeds: int, rungs: int, final_seeds: int) -> list[Rung]:
    """The rungs of a search: R-1 selection rungs, then the fresh-seed judgement."""
    out = [Rung(r, epochs * 2 ** (r - 1), tuple(range(seeds * 2 ** (r - 1))), False) for r in range(1, rungs)]
    first_fresh = max(out[-1].seeds) + 1
    out.append(Rung(rungs, out[-1].epochs, tuple(range(first_fresh, first_fresh + final_seeds)), True))
    return out


def survivors(n: int, keep: float) -> int:
    """How many of n candidates go on: ceil(keep n), at least one."""
    return max(1, math.ceil(keep * n - 1e-9))


def worst(on: str = "val_loss") -> float:
    """The score of a diverged or missing member or candidate: the far end of the better direction."""
    return -math.inf if higher_is_better(on) else math.inf


def member_score(summary: Mapping | None, on: str = "val_loss") -> float:
    """One member's number for selection: the final validation loss (else the final training loss;
    on="val_acc": the final validation accuracy); `worst(on)` when diverged, missing or not finite."""
    if not summary or summary.get("status") != "complete":
        return worst(on)
    if on == "val_acc":
        acc = summary.get("final_val_acc")
        return float(acc) if acc is not None and math.isfinite(acc) else worst(on)
    v = summary.get("final_val_loss")
    if v is None:
        v = summary.get("final_loss")
    return float(v) if v is not None and math.isfinite(v) and v > 0 else (0.0 if v == 0 else math.inf)


def score(values: Sequence[float], on: str = "val_loss") -> float:
    """A candidate's score from its members': the geometric mean of the losses (inf if any is inf;
    0 if any is 0), or on="val_acc" the arithmetic mean of the accuracies (-inf if any is -inf)."""
    if not values or any(math.isinf(v) for v in values):
        return worst(on)
    if on == "val_acc":
        return math.fsum(values) / len(values)
    if any(v == 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def ranked(scores: Mapping[str, float], order: Sequence[str], on: str = "val_loss") -> list[str]:
    """The candidates in `order`, best score first (lowest loss or highest accuracy; ties: earlier first)."""
    sign = -1.0 if higher_is_better(on) else 1.0
    rank = {fn: i for i, fn in enumerate(order)}
    return sorted(order, key=lambda fn: (sign * scores.get(fn, worst(on)), rank[fn]))


def select(scores: Mapping[str, float], order: Sequence[str], keep: float, on: str = "val_loss") -> list[str]:
    """The best `survivors(len(order), keep)` of the candidates in `order` (ties: earlier first)."""
    return ranked(scores, order, on)[: survivors(len(order), keep)]
