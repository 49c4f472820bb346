"""model.norm (batch and layer normalization), model.residual and the pre-activation log
(log.preact_stats): stacked == alone bit for bit, agreement with plain PyTorch, bad input."""

from __future__ import annotations

import csv
import math
import re
import shlex
from pathlib import Path

import pytest
import torch
from torch import nn

from activation_bench.cli.main import app
from activation_bench.config.compose import compose
from activation_bench.config.hashing import config_hash
from activation_bench.data import splits, tables
from activation_bench.data.synthetic import generator
from activation_bench.engine import plan, train
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models.stacked_mlp import member_weights
from activation_bench.engine.preact import STATS, unit_stats
from activation_bench.engine.teacher import make_dataset
from tests.conftest import TINY, assert_refused_by_run_and_sweep, files_under
from tests.engine_helpers import stacked_and_alone

# widths that are multiples of 16, as at the default sizes (docs/reproducibility.md)
SMALL = ["data.n_samples=12", "data.input_dim=8", "model.hidden_dim=16", "epochs=8", "lr=0.01"]


class HalfWidth(nn.Module):
    """A user's gated unit that does not declare itself gated: returns half its inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return torch.sigmoid(a) * b


def _same(alone: train.RunResult, stacked: train.RunResult, labels: dict) -> None:
    for field in ("train_loss", "val_loss", "test_loss", "val_acc", "test_acc", "dead_units", "preact", "n_params"):
        assert getattr(alone, field) == getattr(stacked, field), (field, labels)


# --------------------------------------------------------------------------------------------
# stacked == alone


def test_norm_and_residual_members_equal_single_runs_bitwise_full_batch():
    grid = ["activation=gelu,relu,prelu,swiglu,tanh", "model.norm=batch,layer", "model.residual=false,true",
            "model.depth=3", "seed=1", "data.n_val=8", "log.preact_stats=2", *SMALL, "epochs=4"]  # 20 members
    for labels, alone, stacked in stacked_and_alone(grid):
        _same(alone, stacked, labels)


def test_norm_members_equal_single_runs_bitwise_with_shuffled_minibatches_dropout_and_expressions():
    grid = ["activation=expr", "activation.fn=\"x*sigmoid(x)\",\"max(x, 0)\"", "model.norm=batch,layer",
            "model.residual=true", "model.depth=2", "model.dropout=0.25", "seed=2,3", "batch_size=5", "shuffle=true",
            "data.n_val=8", "log.grad_norms=true", "log.every=2", *SMALL, "epochs=4"]
    for labels, alone, stacked in stacked_and_alone(grid):
        _same(alone, stacked, labels)
        assert alone.grads == stacked.grads, labels


def test_norm_classifiers_equal_single_runs_bitwise():
    grid = ["data=iris", "activation=gelu,relu", "model.norm=batch,layer", "model.residual=true", "model.depth=2",
            "seed=0,1", "batch_size=32", "model.hidden_dim=16", "epochs=4", "lr=0.01", "log.preact_stats=2"]
    for labels, alone, stacked in stacked_and_alone(grid):
        _same(alone, stacked, labels)
        assert alone.val_acc is not None


# --------------------------------------------------------------------------------------------
# plain PyTorch


def _reference(cfg, x, y, val, norm: str, residual: bool, classify: bool = False) -> tuple[list[float], list[float]]:
    """The same run written as a user would: nn.Linear, nn.BatchNorm1d / nn.LayerNorm, the activation,
    torch.optim.Adam, fixed-order minibatches; the validation loss after each epoch in eval mode."""
    depth, n_out = cfg.model.depth, int(y.max()) + 1 if classify else 1
    layers = member_weights(cfg.model.init_resolved, x.shape[1], cfg.model.hidden_dim, cfg.model.hidden_dim, depth,
                            generator(cfg.seed, "init"), torch.float32, n_out)
    lins = nn.ModuleList()
    for k, (w, b) in enumerate(layers):
        bias = norm != "batch" or k == depth  # nn.Linear(bias=False) before nn.BatchNorm1d
        lin = nn.Linear(*w.shape, bias=bias)
        with torch.no_grad():
            lin.weight.copy_(w.T)
            if bias:
                lin.bias.copy_(b)
        lins.append(lin)
    width = cfg.model.hidden_dim
    norms = nn.ModuleList((nn.BatchNorm1d(width) if norm == "batch" else nn.LayerNorm(width)) for _ in range(depth))
    act = activations.create_from_config(dict(cfg.activation))
    params = [*lins.parameters(), *norms.parameters()]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    loss_fn = nn.functional.cross_entropy if classify else nn.functional.mse_loss

    def forward(a: torch.Tensor) -> torch.Tensor:
        for k in range(depth):
            out = act(norms[k](lins[k](a)))
            a = a + out if residual and k > 0 else out
        return lins[-1](a)

    bs = cfg.batch_size or len(x)
    train_losses, val_losses = [], []
    for _ in range(cfg.epochs):
        norms.train()
        total = 0.0
        for i in range(0, len(x), bs):
            opt.zero_grad()
            loss = loss_fn(forward(x[i : i + bs]), y[i : i + bs])
            loss.backward()
            opt.step()
            total += loss.item()
        train_losses.append(total / -(-len(x) // bs))
        norms.eval()
        with torch.no_grad():
            val_losses.append(loss_fn(forward(val[0]), val[1]).item())
    return train_losses, val_losses


@pytest.mark.parametrize(("norm", "residual", "extra"), [
    ("batch", False, []), ("batch", True, ["batch_size=4"]), ("layer", True, []),
    ("layer", False, ["batch_size=5", "activation=tanh", "model.init=he"]),
])
def test_engine_matches_plain_torch_with_norm_layers(norm, residual, extra):
    cfg = compose(["activation=silu", f"model.norm={norm}", f"model.residual={str(residual).lower()}",
                   "model.depth=3", "data.n_val=10", *SMALL, "epochs=12", *extra])
    ds = make_dataset(cfg)
    ref_train, ref_val = _reference(cfg, ds.x, ds.y, (ds.x_val, ds.y_val), norm, residual)
    res = train.train([cfg])[0]
    assert res.train_loss == pytest.approx(ref_train, rel=1e-4, abs=1e-7)
    assert res.val_loss == pytest.approx(ref_val, rel=1e-4, abs=1e-7)


def test_classifier_with_batch_norm_matches_plain_torch():
    cfg = compose(["data=iris", "activation=relu", "model.norm=batch", "model.depth=2", "model.hidden_dim=16",
                   "batch_size=32", "epochs=6", "lr=0.01"])
    ds = splits.make_dataset(cfg)
    ref_train, ref_val = _reference(cfg, ds.x, ds.y, (ds.x_val, ds.y_val), "batch", False, classify=True)
    res = train.train([cfg])[0]
    assert res.train_loss == pytest.approx(ref_train, rel=1e-4)
    assert res.val_loss == pytest.approx(ref_val, rel=1e-4)


@pytest.mark.parametrize("dim", [1, -1])
def test_the_written_out_normalization_gradient_is_exact(dim):
    from activation_bench.engine.models.norm import _Normalize

    g = torch.Generator().manual_seed(0)
    h, gamma, beta = (torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
                      for shape in ((3, 7, 5), (3, 1, 5), (3, 1, 5)))
    assert torch.autograd.gradcheck(lambda h, gm, bt: _Normalize.apply(h, gm, bt, dim)[0], (h, gamma, beta))


def test_norm_parameters_are_counted_and_start_at_one_and_zero():
    cfg = compose(["model.norm=batch", "model.depth=2", *SMALL])
    stack = train._build([cfg, cfg])
    assert [tuple(n.weight.shape) for n in stack.model.norms] == [(2, 1, 16)] * 2
    assert all(bool((n.weight == 1).all()) and bool((n.bias == 0).all()) for n in stack.model.norms)
    plain = train.train([compose(["model.depth=2", *SMALL])])[0].n_params
    assert train.train([cfg])[0].n_params == plain + 2 * 2 * 16 - 2 * 16  # scale and shift, no hidden bias
    assert train.train([compose(["model.norm=layer", "model.depth=2", *SMALL])])[0].n_params == plain + 2 * 2 * 16


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_the_hand_written_gradient_is_bypassed_with_norm(norm):
    assert train._build([compose(TINY)] * 2).hand is not None  # depth 1 without norm: the hand-written path
    stack = train._build([compose([f"model.norm={norm}", *TINY])] * 2)
    assert stack.hand is None and stack.model.norms is not None


def test_residual_at_depth_one_changes_nothing_and_deeper_it_adds_the_input():
    one = [train.train([compose([*SMALL, f"model.residual={r}"])])[0].train_loss for r in ("false", "true")]
    assert one[0] == one[1]
    deep = [train.train([compose([*SMALL, "model.depth=3", f"model.residual={r}"])])[0].train_loss
            for r in ("false", "true")]
    assert deep[0][0] != deep[1][0]


def test_gated_activations_train_with_residual():
    res = train.train([compose(["activation=swiglu", "activation.param_matched=true", "model.residual=true",
                                "model.depth=3", *SMALL])])[0]
    assert res.status == "complete" and all(map(math.isfinite, res.train_loss))


# --------------------------------------------------------------------------------------------
# the pre-activation log


def test_unit_stats_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(0)
    v = torch.stack([torch.randn(2, 300, generator=g), torch.rand(2, 300, generator=g).exp()], dim=-1)  # [2, 300, 2]
    got = unit_stats(v)
    assert got.shape == (len(STATS), 2, 2)
    for m in range(2):
        for u in range(2):
            x = v[m, :, u].double().numpy()
            mu, sd = x.mean(), x.std()
            want = [mu, sd, stats.skew(x), stats.kurtosis(x), stats.kstest(x, "norm", args=(mu, sd)).statistic]
            assert got[:, m, u].tolist() == pytest.approx(want, rel=1e-9, abs=1e-12)
    constant = unit_stats(torch.ones(1, 5, 1))
    assert constant[:2, 0, 0].tolist() == [1.0, 0.0] and all(math.isnan(x) for x in constant[2:, 0, 0].tolist())


def test_preact_log_rows_and_training_unchanged():
    base = [*SMALL, "model.norm=batch", "model.depth=2", "activation=stochastic_gelu", "model.dropout=0.2",
            "data.n_val=8", "epochs=7"]
    logged = train.train([compose([*base, "log.preact_stats=3"])])[0]
    plain = train.train([compose(base)])[0]
    assert (logged.train_loss, logged.val_loss) == (plain.train_loss, plain.val_loss) and plain.preact is None
    want = [(e, k, s) for e in (0, 3, 6, 7) for k in (1, 2) for s in STATS]
    assert [(e, k, s) for e, k, s, _ in logged.preact] == want
    at_init = {(k, s): v for e, k, s, v in logged.preact if e == 0}
    # batch norm at initialisation (scale 1, shift 0): every unit standardised over the probe rows
    assert at_init[(1, "mean")] == pytest.approx(0.0, abs=1e-6)
    assert at_init[(2, "std")] == pytest.approx(1.0, abs=1e-3)


def test_preact_csv_per_member_of_a_sweep_and_reproducible(runner, runs_dir):
    args = ["sweep", "--runs-dir", str(runs_dir), "-q", "activation=gelu,relu", "model.norm=none,batch",
            "model.depth=2", "log.preact_stats=2", *TINY]
    for name in ("a", "b"):
        result = runner.invoke(app, [*args, "--name", name])
        assert result.exit_code == 0, result.output
    files = sorted((runs_dir / "a").glob("*/preact.csv"))
    assert len(files) == 4
    for path in files:
        assert path.read_bytes() == (runs_dir / "b" / path.parent.name / "preact.csv").read_bytes()
        with open(path) as fh:
            rows = list(csv.DictReader(fh))
        assert list(rows[0]) == ["epoch", "layer", "stat", "value"]
        assert {r["epoch"] for r in rows} == {"0", "2", "4"} and {r["layer"] for r in rows} == {"1", "2"}
        assert len(rows) == 3 * 2 * len(STATS)


# --------------------------------------------------------------------------------------------
# configs: hashes, run --config, memory


def test_defaults_keep_the_old_hash_and_each_new_key_changes_it():
    cfg = compose([])
    assert (cfg.model.norm, cfg.model.residual, cfg.log.preact_stats) == ("none", False, 0)
    assert config_hash(cfg) == "d7378612aec1fba2"  # the release before any added key (tests/test_config.py)
    hashes = {config_hash(compose([o])) for o in ("model.norm=batch", "model.norm=layer", "model.residual=true",
                                                   "log.preact_stats=5")}
    assert len(hashes) == 4 and config_hash(cfg) not in hashes


def test_run_config_reruns_a_norm_run_bit_for_bit(runner, runs_dir):
    args = ["--runs-dir", str(runs_dir), "-q"]
    first = runner.invoke(app, ["run", *args, "model.norm=batch", "model.residual=true", "model.depth=2",
                                "log.preact_stats=2", "data.n_val=4", *TINY])
    assert first.exit_code == 0, first.output
    (run,) = list(runs_dir.iterdir())
    again = runner.invoke(app, ["run", *args, "--config", str(run / "config.yaml")])
    assert again.exit_code == 0, again.output
    (other,) = [d for d in runs_dir.iterdir() if d != run]
    for name in ("losses.csv", "preact.csv"):
        assert (run / name).read_bytes() == (other / name).read_bytes()


def test_mlflow_export_carries_the_new_keys_as_params(runner, runs_dir):
    from activation_bench.export import mlflow as ex

    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "--name", "n", "model.norm=batch,layer",
                                 "model.residual=true", "model.depth=2", "log.preact_stats=2", *TINY])
    assert result.exit_code == 0, result.output
    plan = ex.collect([runs_dir / "n"])
    got = {(m.params["model.norm"], m.params["model.residual"], m.params["log.preact_stats"]) for m in plan.members}
    assert got == {("batch", "true", "2"), ("layer", "true", "2")} and not plan.skipped


def test_memory_estimate_counts_norm():
    plain, normed = (plan.member_bytes(compose(["model.depth=4", *o])) for o in ([], ["model.norm=batch"]))
    assert normed > plain


# --------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.norm=group"], "unknown model.norm 'group'; valid: none, batch, layer"),
    (["model.norm=batch", "batch_size=1"], "batch_size=1 gives batches of 1 row"),
    (["model.norm=batch", "data.n_samples=1"], "the training split has 1 row"),
    (["model.norm=batch", "batch_size=5", "data.n_samples=11"], "batch_size=5 over 11 training rows leaves a last "
                                                                 "batch of 1 row"),
    (["model.residual=true", "model.depth=2", "model.hidden_dim=6", "activation=custom",
      "activation._target_=test_norm.HalfWidth"],
     "model.residual=true adds each hidden layer's input (6 wide) to its output, but activation._target_ "
     "'test_norm.HalfWidth' turns 6 values into 3"),
    (["log.preact_stats=-1"], "log.preact_stats must be >= 0"),
])
def test_bad_norm_input_is_refused_in_one_line(runner, runs_dir, overrides, message):
    assert_refused_by_run_and_sweep(runner, runs_dir, [*TINY, *overrides], message)


def test_batch_norm_on_real_data_checks_the_training_split(runner, runs_dir):
    n = tables.shapes(compose(["data=iris"]))[0]
    bs = next(b for b in range(2, n) if n % b == 1)
    assert_refused_by_run_and_sweep(runner, runs_dir, ["data=iris", "model.norm=batch", f"batch_size={bs}", "epochs=1"],
                                    f"batch_size={bs} over {n} training rows leaves a last batch of 1 row")
    assert files_under(runs_dir) == []


# --------------------------------------------------------------------------------------------
# docs/configuration.md's examples

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _doc_section() -> str:
    return DOC.read_text(encoding="utf-8").split("## Normalization, residual connections", 1)[1].split("\n## ", 1)[0]


def test_the_docs_sweep_example_runs_shortened(runner, runs_dir):
    block = re.search(r"```bash\n(.*?)```", _doc_section(), re.S).group(1)  # type: ignore[union-attr]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:2] == ["actbench", "sweep"]
    args = [{"seed=range(4)": "seed=range(1)", "epochs=200": "epochs=3", "data.n_samples=64": "data.n_samples=8"}
            .get(a, a) for a in argv[2:]]
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", *args])
    assert result.exit_code == 0, result.output
    assert len(list((runs_dir / "premise").glob("*/preact.csv"))) == 6


def test_the_docs_preact_csv_lines_are_what_the_command_writes(runner, runs_dir):
    section = _doc_section()
    command = re.search(r"first rows of\s+`actbench run ([^`]*)`", section).group(1)  # type: ignore[union-attr]
    shown = section.split("```\nepoch,layer,stat,value\n", 1)[1].split("```", 1)[0].strip().splitlines()
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *command.split()])
    assert result.exit_code == 0, result.output
    (run,) = list(runs_dir.iterdir())
    written = (run / "preact.csv").read_text().splitlines()[1 : 1 + len(shown)]
    # the same rows; the values to float rounding (another CPU's vector width may round differently)
    for got, want in zip(written, shown, strict=True):
        assert got.rsplit(",", 1)[0] == want.rsplit(",", 1)[0]
        assert float(got.rsplit(",", 1)[1]) == pytest.approx(float(want.rsplit(",", 1)[1]), rel=1e-5, abs=1e-7)
