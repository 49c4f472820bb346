"""Anytime-valid judging: verdicts that may be read after every batch of judging seeds.

A sequential study trains its judging seeds a batch at a time and stops a comparison once its verdict
(verdicts.py: better, worse, equivalent against a margin) is decided. Reading a fixed-n interval after
every batch would inflate the error rate; a *confidence sequence* holds its level at every number of
seeds at once, so the study may look as often as it likes and stop on what it sees.

The confidence sequence here is the scale-invariant normal mixture for a mean with unknown variance
(Lai 1976, "On confidence sequences", Ann. Statist.; Wang and Ramdas 2023, "Anytime-valid t-tests and
confidence sequences for Gaussian means with unknown variance"): for paired differences d_1..d_n
(normal, any mean mu, any spread), the Bayes factor of a N(0, g) prior on the standardised effect with
the scale-invariant prior on the spread,

    BF_n(mu) = (1 + n g)^(-1/2) * ((1 + t^2/nu) / (1 + t^2/(nu (1 + n g))))^((nu + 1)/2),

t the one-sample t statistic of d - mu and nu = n - 1, is a test martingale at the true mu, so by
Ville's inequality P(BF_n(mu) >= 1/alpha for some n) <= alpha. The set of mu with BF_n(mu) < 1/alpha
is mean_n +- b_n * sd_n / sqrt(n), the boundary b_n in closed form (`boundary`): exact for normal
differences from n = 2 on (where an asymptotic sequence is weakest), and ~20 lines, which is why no
library is used (docs/comparing.md says more). It is intersected over n (still valid, never wider).
g = 1 (`G`) keeps it within 1.45-1.7x of the fixed-n t interval at 10-30 seeds; with alpha 0.05
over two comparisons no verdict is possible before 6 seeds. The comparisons of a table share
alpha by Bonferroni (each at alpha/m), and the anytime p-values (min over looks of 1/BF at no
difference) are Holm-corrected.

decisions.py's `decisions(...)` (above compare.py) is what a sequential sweep calls after each batch;
compare(..., sequential=...) shows the same numbers. Pure numpy/pandas: no torch, no scipy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from activation_bench.analysis.loading import ACCURACIES, COLUMNS
from activation_bench.analysis.metrics import ACCURACY
from activation_bench.analysis.verdicts import Margin, verdict_of, with_verdict

G = 1.0  # the mixture's prior variance of the standardised effect
OPEN, DECIDED, MAX_SEEDS = "open", "decided", "max seeds"  # why a comparison stopped (or not)
RECORD_FILE = "judging.json"  # in a sweep folder whose judging seeds were added sequentially (`record_text`)


@dataclass(frozen=True)
class SequentialSpec:
    """How sequential verdicts are read (the level is compare's `alpha`): the most judging seeds a
    comparison may use (an undecided one with that many stopped at "max seeds"; None: more may come,
    it stays "open"), and the mixture's g."""

    max_seeds: int | None = None
    g: float = G


def boundary(n: np.ndarray, alpha: float, g: float = G) -> np.ndarray:
    """b_n: the |t| at which BF_n reaches 1/alpha (inf where it never does: too few seeds)."""
    n = np.asarray(n, float)
    nu, c = n - 1, 1 + n * g
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = np.exp((2 * np.log(1 / alpha) + np.log(c)) / n)  # (1 + u) / (1 + u / c) at the boundary, u = t^2 / nu
        u = (a - 1) / (1 - a / c)
        return np.where((n >= 2) & (a < c), np.sqrt(u * nu), np.inf)


def log_bf(t2: np.ndarray, n: np.ndarray, g: float = G) -> np.ndarray:
    """log BF_n at a t statistic with t^2 = t2 (inf allowed: all differences equal and off mu)."""
    n = np.asarray(n, float)
    nu, c = n - 1, 1 + n * g
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.asarray(t2, float) / nu
        ratio = np.where(np.isinf(u), c, c * (1 + u) / (c + u))
        out = -0.5 * np.log(c) + 0.5 * n * np.log(ratio)
    return np.where(n >= 2, np.nan_to_num(out, nan=-0.5 * np.log(c)), 0.0)


def running(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prefix of the last axis: n, mean and sd (ddof 1; NaN for n = 1)."""
    d = np.asarray(d, float)
    n = np.arange(1, d.shape[-1] + 1, dtype=float)
    shift = d[..., :1]  # centred on the first value against cancellation
    s1, s2 = np.cumsum(d - shift, axis=-1), np.cumsum((d - shift) ** 2, axis=-1)
    mean = shift + s1 / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.clip((s2 - s1**2 / n) / (n - 1), 0, None)
    return n, mean, np.sqrt(var)


def confidence_sequence(d: np.ndarray, alpha: float, g: float = G) -> tuple[np.ndarray, np.ndarray]:
    """The running-intersection confidence sequence of the mean of d along its last axis (rows:
    independent sequences): lo, hi per prefix. (-inf, inf) until a verdict is possible."""
    n, mean, sd = running(d)
    b = boundary(n, alpha, g)
    with np.errstate(invalid="ignore"):
        half = np.where(np.isinf(b), np.inf, b * np.nan_to_num(sd) / np.sqrt(n))
    return np.maximum.accumulate(mean - half, axis=-1), np.minimum.accumulate(mean + half, axis=-1)


def anytime_p(d: np.ndarray, g: float = G) -> np.ndarray:
    """Anytime-valid p-values of "no difference" per prefix: min over looks of 1/BF_k(0), capped at 1."""
    n, mean, sd = running(d)
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = np.where(sd > 0, n * mean**2 / sd**2, np.where(mean == 0, 0.0, np.inf))
    lbf = np.maximum.accumulate(log_bf(t2, n, g), axis=-1)
    return np.minimum(1.0, np.exp(-lbf))


def judge(d: np.ndarray, size: float, higher_is_better: bool, alpha: float,
          g: float = G) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Verdicts per prefix of each row of d (paired differences in seed order): lo, hi, verdict."""
    lo, hi = confidence_sequence(d, alpha, g)
    return lo, hi, verdict_of(lo, hi, size, higher_is_better)


def add_sequential(comp: pd.DataFrame, diffs: Sequence[np.ndarray], how: str, margin: Margin,
                   spec: SequentialSpec, alpha: float = 0.05) -> pd.DataFrame:
    """comp (compare.comparisons' rows) with the anytime-valid verdict of each row's differences
    (diffs, one array per row, seed order): verdict, its interval, seeds_used, stopped, decided_at
    (the fewest seeds at which it was already decided) and p_anytime_holm."""
    from activation_bench.analysis.stats import holm

    m = max(len(diffs), 1)
    lo, hi = np.full(len(diffs), -np.inf), np.full(len(diffs), np.inf)
    used, at, p = np.zeros(len(diffs), int), np.full(len(diffs), np.nan), np.full(len(diffs), np.nan)
    for i, d in enumerate(diffs):
        used[i] = len(d)
        if len(d) < 2:
            continue
        los, his, v = judge(d, margin.size, how == ACCURACY, alpha / m, spec.g)
        lo[i], hi[i] = los[-1], his[-1]
        decided = np.flatnonzero(v != "undecided")
        at[i] = decided[0] + 1 if len(decided) else np.nan
        p[i] = anytime_p(d, spec.g)[-1]
    comp = with_verdict(comp.copy(), lo, hi, how, margin)
    comp["seeds_used"] = used
    comp["stopped"] = [stop_reason(v, n, spec.max_seeds) for v, n in zip(comp["verdict"], used)]
    comp["decided_at"] = pd.array([None if np.isnan(a) else int(a) for a in at], dtype="Int64")
    comp["p_anytime_holm"] = holm(p)
    return comp


def stop_reason(verdict: str, n: int, max_seeds: int | None) -> str:
    """decided; max seeds (undecided at the most seeds allowed); open (more seeds may decide it)."""
    if verdict != "undecided":
        return DECIDED
    return MAX_SEEDS if max_seeds is not None and n >= max_seeds else OPEN


def record_text(margin: Margin, alpha: float, max_seeds: int, look_every: int, loss: str | None = None,
                more: Sequence[tuple] = (), members: Sequence[str] = (), baseline: str | None = None) -> str:
    """What a sequential sweep writes into its folder as RECORD_FILE (atomically) once its judging is
    done: its margin, the column the verdicts judged (`loss`), the baseline where one was given, level,
    --judge-seeds-max and --look-every; `more`: the (margin, column[, baseline]) of the other
    comparisons that judged it (a study's `judge: chosen` sweep), as "columns"; `members`: the judging
    members it trained (a dry run counts them as the judging stage). `compare` on that folder then
    reads its verdicts anytime-validly without being told (`read_record`)."""
    doc: dict = {"margin": margin.value, "unit": margin.unit}
    if loss is not None:
        doc["loss"] = loss
    if baseline is not None:
        doc["baseline"] = baseline
    doc.update(alpha=alpha, max_seeds=max_seeds, look_every=look_every)
    entries = list(dict.fromkeys([(margin, loss, baseline), *[(m[0], m[1], m[2] if len(m) > 2 else None)
                                                             for m in more]]))
    if len(entries) > 1:
        doc["columns"] = [{"loss": c, "margin": m.value, "unit": m.unit, **({"baseline": b} if b else {})}
                          for m, c, b in entries]
    if members:
        doc["members"] = sorted(members)
    return json.dumps(doc, indent=2) + "\n"


def recorded_members(directory: str | Path) -> list[str] | None:
    """The judging members a finished sequential judging in this sweep folder trained (its record's
    "members"), or None where there is no readable record that holds them."""
    try:
        doc = json.loads((Path(directory) / RECORD_FILE).read_text(encoding="utf-8"))
        return [str(m) for m in doc["members"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


# how a record's settings are named in a line: sweep's options, and a study file's keys
FLAGS = {"margin": "--margin", "loss": "--loss", "baseline": "--baseline", "max_seeds": "--judge-seeds-max",
         "look_every": "--look-every", "alpha": "alpha", "columns": "the comparisons' margins"}
KEYS = {**FLAGS, "margin": "margin", "loss": "loss", "baseline": "baseline", "max_seeds": "judge_seeds_max",
        "look_every": "look_every"}


def record_change(directory: str | Path, expected: str, names: dict[str, str] = FLAGS) -> str | None:
    """Whether the judging recorded in this sweep folder was made with the settings of `expected` (a
    record_text without members: what judging now would write): None where it was, or where there is
    no readable record; else one line saying what differs, e.g. "runs/s/judging.json was written with
    --margin 1.05; judging again with --margin 1.02". A record so written is not this command's."""
    file = Path(directory) / RECORD_FILE
    try:
        old = json.loads(file.read_text(encoding="utf-8"))
        old.pop("members")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    new = json.loads(expected)
    new.pop("members", None)
    if old == new:
        return None
    single = "columns" not in old and "columns" not in new
    keys = ["margin", "loss", "baseline"] if single else ["columns"]
    differ = [k for k in [*keys, "max_seeds", "look_every", "alpha"] if _setting(old, k) != _setting(new, k)]
    if not differ:  # another field (a record from another version): name it all
        differ = [*keys, "max_seeds", "look_every", "alpha"]

    def said(doc: dict) -> str:
        return ", ".join(f"{names[k]} {_setting(doc, k)}" for k in differ)

    return f"{file} was written with {said(old)}; judging again with {said(new)}"


def _setting(doc: dict, key: str) -> str:
    """One setting of a record as a line shows it ("none" where the record lacks it)."""
    if key == "margin":
        return _margin_text(doc)
    if key == "columns":
        entries = doc.get("columns") or [doc]
        return "(" + ", ".join(f"{e.get('loss', 'none')} {_margin_text(e)}"
                               + (f" against {e['baseline']}" if e.get("baseline") else "") for e in entries) + ")"
    value = doc.get(key)
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _margin_text(doc: dict) -> str:
    try:
        return f"{float(doc['margin']):g}" + (" pp" if doc.get("unit") == "pp" else "")
    except (KeyError, TypeError, ValueError):
        return "none"


def read_record(paths: Sequence[str | Path], loss: str | None = None) -> dict | None:
    """The sequential judging recorded in the input folders (RECORD_FILE), or None where none has one:
    margin, loss (the judged column; None in a record that predates it), baseline (the KEY=VALUE its
    verdicts were judged against; None where the sweep took compare's default), alpha, max_seeds,
    look_every.
    Where several comparisons judged the folder ("columns"), the one of column `loss`, else the first of
    its kind (accuracy or loss), else the first. Inputs that record different judging: UsageError
    (compare them apart)."""
    from activation_bench.errors import UsageError

    found = {}
    for p in paths:
        file = Path(p) / RECORD_FILE
        if file.is_file():
            try:
                doc = json.loads(file.read_text(encoding="utf-8"))
                first = (Margin(float(doc["margin"]), str(doc["unit"])), _column(doc.get("loss")),
                         _baseline(doc.get("baseline")))
                more = tuple((Margin(float(c["margin"]), str(c["unit"])), _column(c.get("loss")),
                              _baseline(c.get("baseline"))) for c in doc.get("columns", []))
                found[str(p)] = (first, more, float(doc["alpha"]), int(doc["max_seeds"]), int(doc["look_every"]))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise UsageError(f"{file}: not a sequential judging record ({exc})") from None
    if len(set(found.values())) > 1:
        raise UsageError(f"{', '.join(found)}: their sequential judging differs ({RECORD_FILE}): compare them apart")
    if not found:
        return None
    first, more, alpha, max_seeds, look_every = next(iter(found.values()))
    entries = [first, *more]
    acc = loss is not None and loss in ACCURACIES
    pick = next((e for e in entries if loss is not None and e[1] == loss), None) or next(
        (e for e in entries if loss is not None and (e[0].unit == "pp") == acc), first)
    return {"margin": pick[0], "loss": pick[1], "baseline": pick[2], "alpha": alpha, "max_seeds": max_seeds,
            "look_every": look_every}


def recorded_loss(paths: Sequence[str | Path]) -> str | None:
    """The column a sequentially judged sweep's verdicts judged (its first comparison's, where several
    did), which compare reads by default on it; None without a record, or one that predates it."""
    record = read_record(paths)
    return None if record is None else record["loss"]


def _baseline(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or "=" not in value:
        raise ValueError(f"baseline {value!r} is not KEY=VALUE")
    return value


def _column(value: object) -> str | None:
    if value is None:
        return None
    if value not in COLUMNS:
        raise ValueError(f"loss {value!r} is not a per-epoch column")
    return str(value)
