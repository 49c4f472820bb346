"""model=module with models no one here wrote (#67, #79): timm's resnet10t through act_layer,
torchvision's ops.MLP through activation_layer, torchvision's resnet18 through model.replace (its
hard-coded ReLU, on digits repeated to 3 channels) and a 2-layer Hugging Face GPT-2 from a config
through model.replace (its output a ModelOutput read through `logits`), each trained with two
activations (losses differ) and every member equal to its run alone. The data's sizes go in
through ${data:NAME}. Skipped where the optional packages (`pip install activation-bench[models]`)
are absent or do not import beside this torch (docs/your-own-model.md says where they last ran)."""

from __future__ import annotations

import math

import pytest

from tests.engine_helpers import stacked_and_alone

TIMM = ["model=module", "model.target=timm:create_model", "+model.kwargs.model_name=resnet10t",
        "+model.kwargs.num_classes=${data:classes}", "+model.kwargs.in_chans=${data:channels}",
        "model.act_arg=act_layer", "data=digits", "data.n_train=64", "batch_size=32", "epochs=1", "lr=0.003"]
MLP = ["model=module", "model.target=torchvision.ops:MLP", "+model.kwargs.in_channels=${data:features}",
       "+model.kwargs.hidden_channels=[16,${data:classes}]", "model.act_arg=activation_layer", "data=iris",
       "batch_size=32", "epochs=2", "lr=0.01"]
RESNET18 = ["model=module", "model.target=torchvision.models:resnet18", "+model.kwargs.num_classes=${data:classes}",
            "model.replace=[torch.nn.ReLU]", "data=digits", "data.channels=3", "data.n_train=64", "batch_size=32",
            "epochs=1", "lr=0.003"]
GPT2 = ["model=module", "model.target=tests.module_models:tiny_gpt2", "+model.kwargs.vocab_size=${data:vocab}",
        "+model.kwargs.n_positions=${data:length}", "model.replace=[transformers.activations.NewGELUActivation]",
        "data=python_docs", "data.block_size=32", "data.steps=2", "data.eval_windows=4", "batch_size=4", "epochs=1",
        "lr=0.003"]


def _needs(name: str) -> None:
    """Skip unless `name` imports: absent, or present but broken beside this torch (torchvision's
    PyPI wheel raises at import against a torch built elsewhere), both skip with the reason."""
    import importlib

    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failure to import is a reason to skip
        pytest.skip(f"{name} does not import ({type(exc).__name__}: {str(exc).strip()[:120]}); "
                    "pip install activation-bench[models]")


def _check(grid: list[str], sites: int, output: str = "tensor") -> None:
    results = stacked_and_alone([*grid, "activation=relu,mish", "seed=0,1"])
    assert len(results) == 4
    for labels, alone, stacked in results:
        assert repr(alone.train_loss) == repr(stacked.train_loss), labels
        assert repr(alone.val_loss) == repr(stacked.val_loss), labels
        assert alone.model_info["activation_sites"]["modules"] == sites
        assert alone.model_info["output"] == output
        assert all(math.isfinite(v) for v in alone.train_loss)
    by = {(lab["activation"], lab["seed"]): alone.train_loss for lab, alone, _ in results}
    assert by[("relu", "0")] != by[("mish", "0")]


def test_timm_resnet10t_through_act_layer():
    _needs("timm")
    _check(TIMM, 11)


def test_torchvision_mlp_through_activation_layer():
    _needs("torchvision.ops")
    _check(MLP, 1)


def test_torchvision_resnet18_through_replace_on_gray_images_repeated_to_3_channels():
    _needs("torchvision.models")
    _check(RESNET18, 9)


def test_hugging_face_gpt2_from_a_config_through_replace_read_through_logits():
    _needs("transformers")
    _check(GPT2, 2, "logits")
