"""Behavioural deduplication: candidates whose outputs agree on the probe points are one function.

The fingerprint of a candidate is its outputs on the expression probe's fixed points (float64),
each rounded to SIGNIFICANT significant digits (Act-Bench, Bingham and Miikkulainen 2023, groups
its functions the same way). `x + sin(x)` and `sin(x) + x`, or `max(x, 0)` and `x * (x > 0)`-like
rewrites, share a fingerprint; the first candidate drawn is the representative the others are
`same_as`. A candidate the probe refuses (non-finite or constant on the points) is rejected with
the probe's reason and never trained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SIGNIFICANT = 6


@dataclass(frozen=True)
class Verdict:
    fn: str
    status: str  # "unique", "duplicate" or "rejected"
    same_as: str = ""  # the representative's expression, for duplicates
    reason: str = ""  # why it was rejected


def fingerprint(values: np.ndarray, significant: int = SIGNIFICANT) -> bytes:
    """The values rounded to `significant` significant digits, as bytes (a dict key). -0.0 is 0.0."""
    v = np.asarray(values, dtype=np.float64)
    mag = np.zeros_like(v)
    nz = v != 0
    mag[nz] = 10.0 ** (np.floor(np.log10(np.abs(v[nz]))) - (significant - 1))
    rounded = np.where(nz, np.round(v / np.where(nz, mag, 1.0)) * mag, 0.0) + 0.0
    return rounded.tobytes()


Probe = Callable[[str], "tuple[np.ndarray | None, str]"]  # fn -> (values on the probe points, refusal)


def dedup(fns: Sequence[str], probe: Probe, significant: int = SIGNIFICANT) -> list[Verdict]:
    """One verdict per candidate, in order: the first of each fingerprint is unique, later ones are
    duplicates of it; candidates the probe refuses are rejected with its reason."""
    seen: dict[bytes, str] = {}
    out: list[Verdict] = []
    for fn in fns:
        values, reason = probe(fn)
        if values is None:
            out.append(Verdict(fn, "rejected", reason=reason))
            continue
        key = fingerprint(values, significant)
        if key in seen:
            out.append(Verdict(fn, "duplicate", same_as=seen[key]))
        else:
            seen[key] = fn
            out.append(Verdict(fn, "unique"))
    return out
