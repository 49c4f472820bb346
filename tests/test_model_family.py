"""A model family is one registered object: a toy family defined and registered in this file (no
module of the package edited) trains through `run` and `sweep`, is described in its summary, and
has its own bad key refused in one line. And no module outside engine/models/ asks a family's
name or type."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from activation_bench.cli.main import app
from activation_bench.data.synthetic import generator
from activation_bench.engine.models import registry, slices
from activation_bench.engine.models.base import MemberLayers, init_layer
from activation_bench.errors import check
from tests.conftest import assert_refused_by_run_and_sweep, files_under

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ToyConfig:
    name: str = "toy"
    width: int = 3  # the hidden units of x -> act(x W + b) -> sum over units


class ToyNet(MemberLayers):
    """Each member: one hidden layer of `width` units, whose activation outputs are summed."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor, members: list[Any]) -> None:
        super().__init__()
        self.w, self.b = torch.nn.Parameter(w), torch.nn.Parameter(b)
        self.n_out, self.dropout, self.depth = 1, None, 1
        self._init_layers(members, [w], "none")

    def pre_activation(self, layer: int, a: torch.Tensor, batch_stats: bool | None = None) -> torch.Tensor:
        return torch.baddbmm(self.b, a, self.w)

    def layer_output(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return out

    def next_input(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return out

    def forward(self, x: torch.Tensor, record: list[torch.Tensor] | None = None,
                preacts: list[torch.Tensor] | None = None, batch_stats: bool | None = None) -> torch.Tensor:
        return self.hidden(x, record, preacts, batch_stats).sum(dim=-1, keepdim=True)

    def activation_shapes(self, rows: int) -> list[tuple[int, int]]:
        return [(rows, self.w.shape[-1])]

    def per_member_params(self) -> int:
        return self.w[0].numel() + self.b[0].numel()


class Toy(registry.Family):
    name = "toy"
    schema = ToyConfig

    def validate(self, cfg: Any, where: str) -> None:
        check(cfg.model.width >= 1, f"model.width must be >= 1, got {cfg.model.width}", where)

    def describe(self, model: dict[str, Any]) -> str:
        return f"toy {model['width']}"

    def stack_key(self, cfg: Any) -> tuple:
        return ("toy", cfg.model.width)

    def memory(self, cfg: Any) -> registry.Memory:
        w = cfg.model.width
        return registry.Memory(cfg.data.input_dim * w + w, cfg.data.n_samples * 4 * w, [w])

    def macs(self, cfg: Any) -> int:
        return cfg.data.input_dim * cfg.model.width

    def build(self, ordered: Sequence[Any], keys: list[str], device: str, dtype: Any) -> ToyNet:
        width, dim = ordered[0].model.width, ordered[0].data.input_dim
        drawn = [init_layer("torch_default", dim, width, generator(c.seed, "init"), dtype) for c in ordered]
        w = torch.stack([d[0] for d in drawn]).to(device)
        b = torch.stack([d[1][None] for d in drawn]).to(device)
        return ToyNet(w, b, slices.slices_for(ordered, keys, 1, device, dtype))


@pytest.fixture
def toy():
    family = registry.register(Toy())
    yield family
    registry.FAMILIES.pop("toy")


TOY = ["model=toy", "model.width=4", "epochs=3", "data.n_samples=6", "data.input_dim=3"]


def test_a_family_registered_in_a_test_trains_through_run(toy, runner, runs_dir):
    out = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *TOY, "activation=relu"])
    assert out.exit_code == 0, out.output
    (summary,) = runs_dir.rglob("summary.json")
    data = json.loads(summary.read_text())
    assert data["status"] == "complete" and data["model"] == "toy 4" and data["depth"] == 1
    assert data["n_params"] == 3 * 4 + 4
    assert "name: toy" in (summary.parent / "config.yaml").read_text()


def test_a_family_registered_in_a_test_trains_through_sweep(toy, runner, runs_dir):
    out = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", *TOY, "activation=relu,tanh",
                              "seed=range(2)", "--name", "toy"])
    assert out.exit_code == 0, out.output
    summaries = [json.loads(p.read_text()) for p in (runs_dir / "toy").rglob("summary.json")]
    assert len(summaries) == 4 and all(s["status"] == "complete" for s in summaries)
    # a member of the sweep's stack trains as the same run alone
    alone = runs_dir / "alone"
    out = runner.invoke(app, ["run", "--runs-dir", str(alone), "-q", *TOY, "activation=tanh", "seed=1"])
    assert out.exit_code == 0, out.output
    (one,) = alone.rglob("losses.csv")
    (same,) = (runs_dir / "toy").glob("*activation=tanh*seed=1*/losses.csv")
    assert one.read_text() == same.read_text()


def test_a_bad_key_of_a_registered_family_is_refused_in_one_line(toy, runner, runs_dir):
    assert_refused_by_run_and_sweep(runner, runs_dir, [*TOY, "model.width=0"], "model.width must be >= 1, got 0")
    assert files_under(runs_dir) == []


def test_an_unknown_family_is_refused_naming_the_registered_ones(runner, runs_dir):
    assert_refused_by_run_and_sweep(runner, runs_dir, ["model=nonesuch"], "unknown model 'nonesuch'")


# a family's name as a string, or a stacked model's type, outside engine/models/
_ASKS_FAMILY = re.compile(r"""==\s*["'](mlp|cnn|transformer)["']|!=\s*["'](mlp|cnn|transformer)["']|"""
                          r"""isinstance\([^)]*Stacked\w+\)|model_name\(""")


def test_no_module_outside_the_models_subpackage_asks_a_familys_name_or_type():
    package = ROOT / "activation_bench"
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in package.rglob("*.py") if "models" not in p.relative_to(package).parts
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if _ASKS_FAMILY.search(line)]
    assert found == []


def test_every_compiled_family_module_gives_what_the_compiled_engine_asks():
    """compiled/build.py asks a family's compiled module for these (a missing one would only show
    as a fallback to eager at run time)."""
    needed = ("layout", "step_function", "eval_function", "masks", "parts", "evaluation", "shares_function", "plain")
    for name in registry.names():
        impl = registry.family(name).compiled()
        if impl is not None:
            assert [n for n in needed if not hasattr(impl, n)] == [], name
    assert registry.family("transformer").compiled() is None  # eager only, said in one line


def test_an_installed_packages_family_registers_through_its_entry_point(runner, runs_dir, monkeypatch):
    """A package names its Family under the activation_bench.families entry point (docs/extending.md):
    model=NAME trains with no module of actbench edited; a broken entry point is one line, exit 2."""
    from importlib.metadata import EntryPoint

    good = EntryPoint("toy", "tests.test_model_family:Toy", registry.ENTRY_POINTS)
    monkeypatch.setattr(registry, "_entry_points", lambda: [good])
    monkeypatch.setattr(registry, "_BUILTIN_DONE", [])
    try:
        result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "--name", "t", *TOY])
        assert result.exit_code == 0, result.output
        assert json.loads((runs_dir / "t" / "summary.json").read_text())["model"] == "toy 4"
    finally:
        registry.FAMILIES.pop("toy", None)
    bad = EntryPoint("broken", "no_such_package_67:Family", registry.ENTRY_POINTS)
    monkeypatch.setattr(registry, "_entry_points", lambda: [bad])
    monkeypatch.setattr(registry, "_BUILTIN_DONE", [])
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir / "b"), *TOY])
    assert result.exit_code == 2 and "model family 'broken'" in result.stderr and "does not load" in result.stderr
    assert files_under(runs_dir / "b") == []
