"""Behavioural deduplication: candidates whose outputs agree on the probe points are one function.

Two functions are *the same* when, at every probe point of the expression probe (engine/activations/expr.py:
512 clipped N(0, 1) samples and the grid -10, -9.9, ..., 10), their float64 outputs a and b satisfy

    |a - b| <= ATOL + RTOL * max(|a|, |b|)        (RTOL = ATOL = 1e-6)

a tolerance, not equality of rounded values: rounding puts two outputs that differ by far less
than its step on two sides of a boundary, so it finds near-duplicates only by luck. The reasons for
1e-6 (and for leaving derivatives out) are in docs/activation-search.md. `same` is the rule; the
search's `dedup` and `actbench activations --fn`'s "equals" (`builtins_equal_to`) both use it.

Grouping (`groups`): candidates are visited shortest canonical text first (ties: drawn first); each
one is a duplicate of the first visited representative it is the same as, or else a
representative itself. So every duplicate is within the tolerance of the representative its
`same_as` names, and the representatives are pairwise not the same. Pairs are found without
comparing all of them: sorted on one probe point, only candidates inside each one's tolerance
window there can be the same, and only those pairs are compared on every point.

A candidate the probe refuses (non-finite or constant on the points) is rejected with the probe's
reason and never trained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# the duplicate rule lives beside `actbench activations --fn`'s summary, which uses it too
from activation_bench.engine.activations.expr_summary import ATOL, RTOL, builtins_equal_to, same  # noqa: F401

_CHUNK = 4096  # candidate pairs compared on every probe point at once (4096 x 713 float64: 23 MB)


@dataclass(frozen=True)
class Verdict:
    fn: str
    status: str  # "unique", "duplicate" or "rejected"
    same_as: str = ""  # the representative's expression, for duplicates
    reason: str = ""  # why it was rejected


def close_pairs(values: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> np.ndarray:
    """Every pair (i, j), i < j, of rows of `values` (candidates x probe points, finite) that are
    `same`, as an array of shape (pairs, 2), sorted.

    Same at every point means same at any one point: sorted there, row i can only match the rows
    whose value lies in [v_i - w_i, v_i + w_i], w_i = (atol + rtol |v_i|) / (1 - rtol) (from
    |b| <= |a| + |a - b|). Of 32 points spread over the probe, the one with the fewest rows in
    each other's windows gives the pairs to check; they are compared on the 32 points first (a
    cheap cut: functions that agree at one point often part at another), then on every point."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64)
    spread = np.unique(np.linspace(0, values.shape[1] - 1, 32).astype(int))
    order = np.argsort(values[:, spread], axis=0, kind="stable")
    ranked = np.take_along_axis(values[:, spread], order, axis=0)
    width = (atol + rtol * np.abs(ranked)) / (1.0 - rtol)
    span = np.stack([np.searchsorted(ranked[:, c], ranked[:, c] + width[:, c], side="right")
                     for c in range(len(spread))], axis=1) - np.arange(n)[:, None] - 1  # rows above that may match
    col = int(np.argmin(span.sum(axis=0)))
    count = span[:, col]
    first = np.repeat(np.arange(n), count)
    second = first + 1 + np.arange(len(first)) - np.repeat(np.cumsum(count) - count, count)
    i, j = order[first, col], order[second, col]
    coarse = values[:, spread]
    near = same(coarse[i], coarse[j], rtol, atol)
    i, j = i[near], j[near]
    keep = np.zeros(len(i), dtype=bool)
    for s in range(0, len(i), _CHUNK):
        keep[s:s + _CHUNK] = same(values[i[s:s + _CHUNK]], values[j[s:s + _CHUNK]], rtol, atol)
    pairs = np.stack([np.minimum(i, j), np.maximum(i, j)], axis=1)[keep]
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def groups(fns: Sequence[str], values: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> list[int]:
    """For each candidate (fns[k], its outputs values[k]), the index of its representative (itself
    for a representative): visited shortest text first, ties in the given order, each one joins the
    first visited representative it is the same as."""
    neighbours: list[list[int]] = [[] for _ in fns]
    for i, j in close_pairs(values, rtol, atol).tolist():
        neighbours[i].append(j)
        neighbours[j].append(i)
    visit = sorted(range(len(fns)), key=lambda k: (len(fns[k]), k))
    rank = {k: r for r, k in enumerate(visit)}
    rep = list(range(len(fns)))
    for k in visit:
        leaders = [m for m in neighbours[k] if rank[m] < rank[k] and rep[m] == m]
        if leaders:
            rep[k] = min(leaders, key=rank.__getitem__)
    return rep


Probe = Callable[[str], "tuple[np.ndarray | None, str]"]  # fn -> (values on the probe points, refusal)


def dedup(fns: Sequence[str], probe: Probe, rtol: float = RTOL, atol: float = ATOL) -> list[Verdict]:
    """One verdict per candidate, in order: a representative is unique, the others of its group are
    duplicates naming it (`groups`); candidates the probe refuses are rejected with its reason. A
    text drawn twice is probed once."""
    probed: dict[str, tuple[np.ndarray | None, str]] = {}
    for fn in fns:
        if fn not in probed:
            probed[fn] = probe(fn)
    kept = [k for k, fn in enumerate(fns) if probed[fn][0] is not None]
    rep = groups([fns[k] for k in kept], np.stack([probed[fns[k]][0] for k in kept]), rtol, atol) if kept else []
    leader = {k: kept[r] for k, r in zip(kept, rep, strict=True)}
    out: list[Verdict] = []
    for k, fn in enumerate(fns):
        if k not in leader:
            out.append(Verdict(fn, "rejected", reason=probed[fn][1]))
        elif leader[k] == k:
            out.append(Verdict(fn, "unique"))
        else:
            out.append(Verdict(fn, "duplicate", same_as=fns[leader[k]]))
    return out


def expr_probe(dtype: str = "float32") -> Probe:
    """The expression probe (engine/activations/expr.py) as `dedup` wants it: values in float64 for the
    comparison, and the refusal `actbench run` would give in the training dtype."""
    import torch

    from activation_bench.engine.activations import expr
    from activation_bench.errors import UsageError

    train_dtype = {"float32": torch.float32, "float64": torch.float64}[dtype]

    def probe(fn: str) -> tuple[np.ndarray | None, str]:
        try:
            parsed = expr.parse(fn)
            if parsed.params:
                return None, f"has parameters ({', '.join(parsed.params)})"
            exact = expr.probe(parsed, {}, torch.float64)
            result = exact if exact.problem or train_dtype == torch.float64 else expr.probe(parsed, {}, train_dtype)
        except UsageError as exc:
            return None, str(exc)
        if result.problem is not None:
            return None, "constant on the probe points" if result.constant else "not finite on the probe points"
        return exact.outputs.numpy(), ""

    return probe
