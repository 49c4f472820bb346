"""The search's behavioural deduplication (search/fingerprint.py): a tolerance on the probe outputs,
the pairs it finds (against brute force), the representative it keeps, and `actbench activations
--fn`'s "equals", which uses the same rule."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from activation_bench.cli.main import app
from activation_bench.search import fingerprint, space


@pytest.fixture(scope="module")
def probe():
    return fingerprint.expr_probe()


def _verdicts(fns, probe):
    return {v.fn: (v.status, v.same_as) for v in fingerprint.dedup(fns, probe)}


def test_copies_of_sinh_are_one_group_whatever_the_order(probe):
    # exp(x) - sinh(x) = cosh(x) > 0, so the min is sinh(x) exactly; the quotient is 1e-7 off it
    fns = ["min(exp(x), sinh(x))", "sinh(x) / (1 + 1e-07)", "sinh(x)"]
    for order in itertools.permutations(fns):
        got = _verdicts(list(order), probe)
        assert got == {"sinh(x)": ("unique", ""), "min(exp(x), sinh(x))": ("duplicate", "sinh(x)"),
                       "sinh(x) / (1 + 1e-07)": ("duplicate", "sinh(x)")}, order


def test_equal_length_twins_keep_the_first_drawn(probe):
    assert _verdicts(["x * sigmoid(x)", "sigmoid(x) * x"], probe)["sigmoid(x) * x"] == ("duplicate", "x * sigmoid(x)")
    assert _verdicts(["sigmoid(x) * x", "x * sigmoid(x)"], probe)["x * sigmoid(x)"] == ("duplicate", "sigmoid(x) * x")


@pytest.mark.parametrize(("a", "b"), [
    ("x", "x + 1e-3 * x ** 3"),  # 1 apart at x = 10
    ("tanh(x)", "x / (1 + abs(x))"),
    ("x", "x * 1.00001"),  # relative 1e-5: ten times the tolerance
    ("exp(-x ** 2)", "exp(-x ** 2) + 1e-5"),  # absolute 1e-5 where the values are small
])
def test_different_functions_stay_apart(probe, a, b):
    assert _verdicts([a, b], probe) == {a: ("unique", ""), b: ("unique", "")}


@pytest.mark.parametrize("b", ["x * 1.0000005", "x + 5e-7", "exp(-x ** 2) + 5e-7", "cosh(x) - sinh(x) + 1e-7"])
def test_differences_inside_the_tolerance_are_duplicates(probe, b):
    a = "exp(-x)" if "cosh" in b else "exp(-x ** 2)" if "exp" in b else "x"
    assert _verdicts([b, a], probe)[b] == ("duplicate", a)


def test_refusals_keep_the_probes_reason(probe):
    verdicts = {v.fn: v for v in fingerprint.dedup(["sqrt(x)", "x - x", "x", "sqrt(x)"], probe)}
    assert verdicts["sqrt(x)"].status == "rejected" and "not finite" in verdicts["sqrt(x)"].reason
    assert verdicts["x - x"].status == "rejected" and "constant" in verdicts["x - x"].reason
    assert verdicts["x"].status == "unique"


def test_same_is_symmetric_and_scaled():
    a = np.array([0.0, 1.0, -1e3, 1e-9])
    assert fingerprint.same(a, a + 9e-7) and fingerprint.same(a + 9e-7, a)  # absolute, below 1 in size
    assert not fingerprint.same(a, a + 3e-6)
    assert fingerprint.same(a, a * (1 + 4e-7)) and not fingerprint.same(a, a * (1 + 3e-6))  # relative at 1e3
    assert fingerprint.same(np.stack([a, a + 1]), a).tolist() == [True, False]


def _brute(values):
    """Every pair i < j that fingerprint.same holds for: each row against all the rows after it at once
    (same broadcasts over rows, one answer per pair as in test_same_is_symmetric_and_scaled)."""
    return {(i, i + 1 + int(k)) for i in range(len(values) - 1)
            for k in np.flatnonzero(fingerprint.same(values[i + 1:], values[i]))}


def test_close_pairs_finds_what_brute_force_finds():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(120, 40)) * np.logspace(-8, 6, 120)[:, None]  # tiny to huge
    base[:10, :20] = 0.0  # many rows alike at half the points
    rows = [base]
    for scale in (1e-9, 3e-7, 1e-6, 3e-6):  # inside, at the edge of and outside the tolerance
        noise = rng.uniform(-1, 1, size=base.shape) * scale
        rows.append(base + noise * (1 + np.abs(base)))
    values = np.concatenate(rows)[rng.permutation(600)]
    got = {tuple(p) for p in fingerprint.close_pairs(values).tolist()}
    assert got == _brute(values)
    assert len(got) > 600 and fingerprint.close_pairs(values[:1]).shape == (0, 2)


def test_representatives_are_the_shortest_and_never_chain():
    # b is within the tolerance of a and of c, a and c are not: c cannot ride on b into a's group
    v = np.array([[1.0], [1.0 + 1.5e-6], [1.0 + 3e-6], [5.0], [5.0]])
    fns = ["aa", "bbb", "ccc", "d-long", "d"]
    assert fingerprint.groups(fns, v) == [0, 0, 2, 4, 4]


def test_the_full_core_space_counts():
    """The counts docs/activation-search.md quotes; every duplicate is within the tolerance of the
    representative it names, and no two representatives are."""
    fns = space.core().candidates()
    probe = fingerprint.expr_probe()
    probed = {fn: probe(fn) for fn in set(fns)}
    verdicts = fingerprint.dedup(fns, probed.__getitem__)
    assert Counter(v.status for v in verdicts) == {"unique": 3046, "duplicate": 2133, "rejected": 581}
    values = {fn: probed[fn][0] for fn in probed if probed[fn][0] is not None}
    dup = [v for v in verdicts if v.status == "duplicate"]
    # every pair at once (same compares along the last axis): one call instead of one per duplicate
    assert fingerprint.same(np.stack([values[v.fn] for v in dup]), np.stack([values[v.same_as] for v in dup])).all()
    assert all(len(v.same_as) <= len(v.fn) for v in dup)
    reps = np.stack([values[v.fn] for v in verdicts if v.status == "unique"])
    assert len(fingerprint.close_pairs(reps)) == 0


@pytest.mark.parametrize(("text", "equals"), [
    ("x*sigmoid(x)/(1 + 1e-7)", ["silu"]),
    ("tanh(x) + 5e-7", ["tanh"]),  # an absolute difference below 1e-6 where tanh is near 0
    ("tanh(x) + 1e-5", []),
    ("x/(1+abs(x))", ["softsign"]),
])
def test_activations_fn_equals_uses_the_search_rule(runner, text, equals):
    result = runner.invoke(app, ["activations", "--fn", text, "--format", "csv"])
    assert result.exit_code == 0, result.output
    facts = dict(line.split(",", 1) for line in result.stdout.splitlines()[1:])
    assert facts["equals"] == (", ".join(equals) or "none")
    values, _ = fingerprint.expr_probe("float64")(text)
    assert fingerprint.builtins_equal_to(values) == equals
