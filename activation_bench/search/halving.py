"""Successive halving over candidate activations, rung by rung.

Rung r (1-based) of R trains its candidates for epochs * 2^(r-1) on seeds * 2^(r-1) seeds
(0, 1, ...) and keeps the best fraction `keep` for the next rung, so each rung costs about as much
as the first at keep = 1/4. Rung 1 trains every candidate at each of a few screening learning
rates and keeps, per candidate, the best of them; later screening rungs train each candidate at the
learning rate it chose in rung 1. The last rung is the judgement (search/judge.py): the survivors
of rung R-1 (at most a cap) and the baselines relu, gelu, silu and tanh, trained like rung R-1,
first at every value of a learning-rate grid on `tune_seeds` tuning seeds, then at each function's
chosen value on `final_seeds` judging seeds. Both sets are fresh: they start after the largest
screening seed. Select on some seeds, judge on others: a screen's winner is optimistic until
re-judged.

The selection score of a candidate at one learning rate in a screening rung (`--select-on`,
SELECT_ON) is, by default (val_loss), the geometric mean over its seeds of the early-stopped
validation loss (each run's lowest val_loss; the final training loss where the task has no
validation split); a diverged or missing member scores infinity and lower is better. With val_acc
(classification tasks) it is the arithmetic mean over its seeds of the validation accuracy at the
epoch of the lowest val_loss (a fraction in [0, 1]); a diverged or missing member scores -infinity
and higher is better. These are the numbers `compare --metric early_stop --tune lr` selects on.
Which way is better comes from the analysis layer (`loading.higher_is_better`). Ties go to the
candidate drawn first, and within a candidate to the smaller learning rate.
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
    seeds: tuple[int, ...]  # the final rung's: its judging seeds
    final: bool
    tune_seeds: tuple[int, ...] = ()  # the final rung's tuning seeds (the learning-rate grid)


def schedule(epochs: int, seeds: int, rungs: int, final_seeds: int, tune_seeds: int = 4) -> list[Rung]:
    """The rungs of a search: R-1 selection rungs, then the judgement on fresh seeds (tuning seeds,
    then judging seeds)."""
    out = [Rung(r, epochs * 2 ** (r - 1), tuple(range(seeds * 2 ** (r - 1))), False) for r in range(1, rungs)]
    fresh = max(out[-1].seeds) + 1
    tune = tuple(range(fresh, fresh + tune_seeds))
    judge = tuple(range(fresh + tune_seeds, fresh + tune_seeds + final_seeds))
    out.append(Rung(rungs, out[-1].epochs, judge, True, tune))
    return out


def survivors(n: int, keep: float) -> int:
    """How many of n candidates go on: ceil(keep n), at least one."""
    return max(1, math.ceil(keep * n - 1e-9))


def worst(on: str = "val_loss") -> float:
    """The score of a diverged or missing member or candidate: the far end of the better direction."""
    return -math.inf if higher_is_better(on) else math.inf


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
