"""Behavioural deduplication: candidates whose outputs agree on the probe points are one function.

The fingerprint of a candidate is its outputs on the expression probe's fixed points (float64),
each rounded to BITS bits of mantissa (about six significant digits) (Act-Bench, Bingham and Miikkulainen 2023, groups
its functions the same way). `x + sin(x)` and `sin(x) + x`, or `max(x, 0)` and `x * (x > 0)`-like
rewrites, share a fingerprint; the first candidate drawn is the representative the others are
`same_as`. A candidate the probe refuses (non-finite or constant on the points) is rejected with
the probe's reason and never trained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

BITS = 20  # about six significant digits


@dataclass(frozen=True)
class Verdict:
    fn: str
    status: str  # "unique", "duplicate" or "rejected"
    same_as: str = ""  # the representative's expression, for duplicates
    reason: str = ""  # why it was rejected


def fingerprint(values: np.ndarray, bits: int = BITS) -> bytes:
    """The values with their mantissas rounded to `bits` bits (a relative precision of about
    2^-bits), as bytes (a dict key); -0.0 counts as 0.0."""
    mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64))
    return (np.ldexp(np.round(mantissa * 2.0**bits), exponent - bits) + 0.0).tobytes()


Probe = Callable[[str], "tuple[np.ndarray | None, str]"]  # fn -> (values on the probe points, refusal)


def dedup(fns: Sequence[str], probe: Probe, bits: int = BITS) -> list[Verdict]:
    """One verdict per candidate, in order: the first of each fingerprint is unique, later ones are
    duplicates of it; candidates the probe refuses are rejected with its reason."""
    seen: dict[bytes, str] = {}
    out: list[Verdict] = []
    for fn in fns:
        values, reason = probe(fn)
        if values is None:
            out.append(Verdict(fn, "rejected", reason=reason))
            continue
        key = fingerprint(values, bits)
        if key in seen:
            out.append(Verdict(fn, "duplicate", same_as=seen[key]))
        else:
            seen[key] = fn
            out.append(Verdict(fn, "unique"))
    return out


def expr_probe(dtype: str = "float32") -> Probe:
    """The expression probe (engine/expr.py) as `dedup` wants it: values in float64 for the
    fingerprint, and the refusal `actbench run` would give in the training dtype."""
    import torch

    from activation_bench.engine import expr
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
