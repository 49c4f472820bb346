"""Successive halving over candidate activations, rung by rung.

Rung r (1-based) of R trains its candidates for epochs * 2^(r-1) on seeds * 2^(r-1) seeds
(0, 1, ...) and keeps the best fraction `keep` for the next rung, so each rung costs about as much
as the first at keep = 1/4. The last rung is the judgement: the survivors of rung R-1 and the
baselines relu, gelu, silu and tanh, trained like rung R-1 but on `final_seeds` fresh seeds that
no selection used (they start after the largest selection seed). Select on some seeds, judge on
others: a screen's winner is optimistic until re-judged.

The selection score of a candidate in a rung is the geometric mean, over its seeds, of the final
validation loss (the training loss where the task has no validation split); a diverged or missing
member scores infinity. Lower is better; ties go to the candidate drawn first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BASELINES = ("relu", "gelu", "silu", "tanh")


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


def member_score(summary: Mapping | None) -> float:
    """One member's loss for selection: final validation loss (else final training loss); inf when
    diverged, missing or not finite."""
    if not summary or summary.get("status") != "complete":
        return math.inf
    v = summary.get("final_val_loss")
    if v is None:
        v = summary.get("final_loss")
    return float(v) if v is not None and math.isfinite(v) and v > 0 else (0.0 if v == 0 else math.inf)


def score(losses: Sequence[float]) -> float:
    """The geometric mean of the members' losses (inf if any is inf; 0 if any is 0)."""
    if not losses or any(math.isinf(v) for v in losses):
        return math.inf
    if any(v == 0 for v in losses):
        return 0.0
    return math.exp(sum(math.log(v) for v in losses) / len(losses))


def select(scores: Mapping[str, float], order: Sequence[str], keep: float) -> list[str]:
    """The best `survivors(len(order), keep)` of the candidates in `order` (ties: earlier first)."""
    rank = {fn: i for i, fn in enumerate(order)}
    ranked = sorted(order, key=lambda fn: (scores.get(fn, math.inf), rank[fn]))
    return ranked[: survivors(len(order), keep)]
