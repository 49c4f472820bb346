"""A run's saved config.yaml lists its own data source's keys only, and re-composes to the same
config and hash; saved configs that list every key (the format before) still re-compose."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from activation_bench.config.compose import compose
from activation_bench.config.hashing import config_hash
from activation_bench.config.saved import compose_saved
from activation_bench.data.keys import used_keys
from activation_bench.runs.contents import saved_yaml

SOURCES = [
    ["data=normal"], ["data=uniform"], ["data=normal", "data.target=teacher", "data.noise=0.1", "data.n_val=3"],
    ["data=function", "data.fn=bessel_j0"], ["data=diabetes"], ["data=star98"], ["data=randhie"], ["data=iris"],
    ["data=digits"], ["data=wine"], ["data=breast_cancer"], ["data=mnist1d"],
]


def _csv(tmp_path: Path) -> list[str]:
    path = tmp_path / "t.csv"
    path.write_text("a,b,y\n" + "".join(f"{i},{i % 3},{'xyz'[i % 2]}\n" for i in range(20)))
    return ["data=csv", f"data.path={path}", "data.target=y", "data.task=classification"]


@pytest.mark.parametrize("overrides", [*SOURCES, "csv"])
def test_saved_config_holds_its_sources_keys_and_recomposes_to_the_same_hash(overrides, tmp_path):
    overrides = _csv(tmp_path) if overrides == "csv" else overrides
    cfg = compose([*overrides, "epochs=3"])
    path = tmp_path / "config.yaml"
    path.write_text(saved_yaml(cfg))
    saved = yaml.safe_load(path.read_text())
    assert set(saved["data"]) <= set(used_keys(cfg.data))
    again = compose_saved(path, [])
    assert again.plain() == cfg.plain()
    assert config_hash(again) == config_hash(cfg)


def test_star98_config_has_no_synthetic_keys(tmp_path):
    saved = yaml.safe_load(saved_yaml(compose(["data=star98"])))
    for key in ("n_samples", "input_dim", "mean", "std", "low", "high", "teacher_activation", "noise", "fn"):
        assert key not in saved["data"], key


def test_a_full_saved_config_of_the_earlier_format_still_recomposes(tmp_path):
    cfg = compose(["data=star98", "epochs=3"])
    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())  # every key, nulls included: what runs saved before
    assert compose_saved(path, []).plain() == cfg.plain()
