"""The engine resolves oneMKL's vector-math kernels on one thread before it trains (engine/vml.py)."""

from __future__ import annotations

import torch

from activation_bench.config.compose import compose
from activation_bench.engine import train, vml
from tests.conftest import TINY


def test_warm_up_calls_each_vml_function_once_per_dtype_on_one_element(monkeypatch):
    calls = []
    for name in vml.VML_OPS:
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda x, _n=name, _f=real: calls.append((_n, x.dtype, x.numel())) or _f(x))
    monkeypatch.setattr(vml, "_resolved", False)
    vml.resolve_vml_kernels()
    assert sorted(calls, key=str) == sorted(((n, dt, 1) for n in vml.VML_OPS for dt in (torch.float32, torch.float64)),
                                            key=str)
    vml.resolve_vml_kernels()  # once per process
    assert len(calls) == 2 * len(vml.VML_OPS)


def test_training_resolves_the_kernels_before_anything_else(monkeypatch):
    order = []
    monkeypatch.setattr(train, "resolve_vml_kernels", lambda: order.append("vml"))
    build = train._build
    monkeypatch.setattr(train, "_build", lambda cfgs: order.append("build") or build(cfgs))
    train.train([compose([*TINY, "epochs=2"])])
    assert order == ["vml", "build"]
