"""model=module with models no one here wrote (#67): timm's resnet10t through act_layer and
torchvision's ops.MLP through activation_layer, each trained a few steps with two activations
(losses differ) and a member equal to its run alone. Skipped where the optional packages
(`pip install activation-bench[models]`) are absent."""

from __future__ import annotations

import math

import pytest

from tests.engine_helpers import stacked_and_alone

TIMM = ["model=module", "model.target=timm:create_model", "+model.kwargs.model_name=resnet10t",
        "+model.kwargs.num_classes=10", "+model.kwargs.in_chans=1", "model.act_arg=act_layer", "data=digits",
        "data.n_train=64", "batch_size=32", "epochs=1", "lr=0.003"]
MLP = ["model=module", "model.target=torchvision.ops:MLP", "+model.kwargs.in_channels=4",
       "+model.kwargs.hidden_channels=[16,3]", "model.act_arg=activation_layer", "data=iris", "batch_size=32",
       "epochs=2", "lr=0.01"]


def _needs(name: str) -> None:
    """Skip unless `name` imports: absent, or present but broken beside this torch (torchvision's
    PyPI wheel raises at import against a torch built elsewhere), both skip with the reason."""
    import importlib

    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failure to import is a reason to skip
        pytest.skip(f"{name} does not import ({type(exc).__name__}: {str(exc).strip()[:120]}); "
                    "pip install activation-bench[models]")


def _check(grid: list[str]) -> None:
    results = stacked_and_alone([*grid, "activation=relu,mish", "seed=0,1"])
    for labels, alone, stacked in results:
        assert repr(alone.train_loss) == repr(stacked.train_loss), labels
        assert alone.model_info["activation_sites"]["modules"] >= 1
        assert all(math.isfinite(v) for v in alone.train_loss)
    by = {(lab["activation"], lab["seed"]): alone.train_loss for lab, alone, _ in results}
    assert by[("relu", "0")] != by[("mish", "0")]


def test_timm_resnet10t_through_act_layer():
    _needs("timm")
    _check(TIMM)


def test_torchvision_mlp_through_activation_layer():
    _needs("torchvision.ops")
    _check(MLP)
