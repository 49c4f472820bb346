"""losses.csv's text: every float as repr writes it (the shortest text that reads back as the same
float), whichever path formats it (runs/contents.reprs)."""

from __future__ import annotations

import math
import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from activation_bench.runs.contents import losses_csv, reprs

EDGES = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1e-4, math.nextafter(1e-4, 0),
         math.nextafter(1e-4, 1), 1e16, math.nextafter(1e16, 0), 1.7976931348623157e308, 1.0, 2.0, 100.0,
         1e15, 0.1, 1 / 3, -2.5, 3.4028234663852886e38, 1.1754943508222875e-38, 1e-9, math.nextafter(1e-9, 0),
         math.nextafter(1e-9, 1), -1e-10, 1e-100, 2.2250738585072014e-308, 1e-5, 9.5e-10, 3.4694470036524025e-19]


def test_reprs_is_repr_at_the_edges_and_on_300_000_values():
    rng = random.Random(0)
    values = [rng.random() * 10 ** rng.uniform(-330, 20) * rng.choice((1, -1)) for _ in range(200_000)]
    # float32 losses as the engine hands them over (widened to Python floats)
    values += [struct.unpack("f", struct.pack("f", v))[0] for v in values[:100_000] if abs(v) < 3e38]
    values += EDGES
    assert reprs(values) == [repr(v) for v in values]


@settings(max_examples=120, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True) | st.integers(-10**6, 10**6),
                max_size=50))
def test_reprs_is_repr(values):
    assert reprs(values) == [repr(v) for v in values]


def test_anything_but_python_floats_is_reprs_whole():
    import numpy as np

    values = [np.float64(0.5), 0.25]
    assert reprs(values) == [repr(v) for v in values]
    assert reprs([]) == []


def test_losses_csv_text():
    cols = {"train_loss": [0.5, float("nan"), 1e-05], "val_loss": [2.0, 0.125, float("inf")]}
    assert losses_csv(cols) == "epoch,train_loss,val_loss\n1,0.5,2.0\n2,nan,0.125\n3,1e-05,inf\n"
    assert losses_csv({"train_loss": [0.3333333333333333]}) == "epoch,train_loss\n1,0.3333333333333333\n"
