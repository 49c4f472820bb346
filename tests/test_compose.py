"""compose_many's shortcuts (activation_bench/config/compose.py) against Hydra's own composition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from activation_bench.cfg import Cfg
from activation_bench.config import compose, files, validate
from activation_bench.config.compose import compose_many
from activation_bench.config.files import config_dir, group_options
from activation_bench.config.schema import NOT_GLOBBED, SPLICED, _register_schema
from activation_bench.errors import UsageError


def hydra_composed(overrides: list[str]) -> dict:
    """Hydra's own composition, then the same validation (which derives model.init_resolved)."""
    _register_schema()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        composed = hydra_compose(config_name="config", overrides=overrides)
        cfg = Cfg.wrap(OmegaConf.to_container(composed, resolve=True))
    validate.validate(cfg)
    return cfg.plain()


OPTIONS = [(g, o) for g in SPLICED for o in group_options(g) if o not in NOT_GLOBBED]


# a model family that does not take the default data (normal) is composed with data it takes
WITH = {"model=cnn": ["data=mnist1d"], "model=transformer": ["data=python_docs", "batch_size=4"]}


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_direct_option_load_equals_hydra_compose(group: str, option: str) -> None:
    overrides = [f"{group}={option}", *WITH.get(f"{group}={option}", [])]
    ours = compose_many([overrides])[0]
    assert ours.plain() == hydra_composed(overrides)


def _composed_or_refused(compose: Callable[[list[str]], dict], overrides: list[str]) -> Any:
    try:
        return compose(overrides)
    except UsageError as exc:
        return str(exc).split(" (in: ")[0]


def test_model_data_and_activation_spliced_together_equal_hydra() -> None:
    """Each family's subtree is spliced beside the data's and the activation's (one composition per
    option, not per combination): the same configs as Hydra's, and the same refusals."""
    members = [[f"model={model}", f"data={data}", f"activation={act}", "seed=1", *extra]
               for model, extra in (("mlp", []), ("cnn", ["model.channels=[4,4]", "model.kernel=[3,3]"]),
                                    ("transformer", ["batch_size=4", "model.n_embd=32"]))
               for data, act in (("normal", "relu"), ("mnist1d", "swiglu"), ("iris", "prelu"), ("python_docs", "relu"))]
    for member in members:
        ours = _composed_or_refused(lambda m: compose_many([m])[0].plain(), member)
        assert ours == _composed_or_refused(hydra_composed, member), member


def test_many_members_with_scalar_overrides_equal_hydra() -> None:
    members = [["activation=leaky_relu", "data=uniform", "activation.negative_slope=0.2", "seed=3"],
               ["data=uniform", "activation=elu", "data.n_samples=7"],
               ["activation=prelu", "lr=0.01"]]
    for got, member in zip(compose_many(members), members):
        assert got.plain() == hydra_composed(member)


def test_members_that_fall_back_to_hydra_equal_hydra() -> None:
    """Not group-local (an experiment preset), additions of keys, and a spliced group beside another
    choice of a preset: composed by Hydra, scalars still applied once per distinct value."""
    members = [["experiment=gelu_vs_relu", "seed=2"], ["experiment=gelu_vs_relu", "activation=relu", "seed=2"],
               ["activation=custom", "activation._target_=torch.nn.Tanh", "seed=1"],
               ["activation=custom", "activation._target_=torch.nn.Hardtanh", "+activation.min_val=-2.0"]]
    for got, member in zip(compose_many(members), members):
        assert got.plain() == hydra_composed(member)


def test_option_with_defaults_list_falls_back_to_hydra(tmp_path, monkeypatch) -> None:
    import shutil

    root = tmp_path / "configs"
    shutil.copytree(config_dir(), root)
    # an option that pulls in another through its own defaults list: only Hydra gets this right
    (root / "data" / "wide.yaml").write_text("defaults:\n  - normal\n\ninput_dim: 128\n")
    monkeypatch.setattr(files, "config_dir", lambda: root)
    monkeypatch.setattr(compose, "config_dir", lambda: root)
    got = compose_many([["data=wide"]])[0]
    assert got.data.input_dim == 128 and got.data.name == "normal" and got.data.std == 1.0
    assert compose._compose_option(OmegaConf.create({"data": {}}), "data", "wide") is None
