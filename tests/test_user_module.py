"""model=module (#67): a user's own torch.nn.Module, the activation passed in through its
constructor (model.act_arg) or swapped in by type (model.replace); members equal their runs alone
bit for bit; every data shape; bad input refused in one line."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

from activation_bench.cli.main import app
from activation_bench.config.compose import compose
from activation_bench.engine import train
from tests.conftest import assert_refused_by_run_and_sweep, files_under
from tests.engine_helpers import stacked_and_alone

M = "tests.module_models"
ACT = ["model=module", f"model.target={M}:ActNet", "model.act_arg=act_layer", "data=digits", "data.n_train=150",
       "epochs=2", "batch_size=64", "lr=0.01"]
MODELS_SHA256 = hashlib.sha256((Path(__file__).parent / "module_models.py").read_bytes()).hexdigest()
REPLACE = ["model=module", f"model.target={M}:Fixed", "model.replace=[torch.nn.ReLU]", "data=iris", "epochs=3",
           "batch_size=32", "lr=0.01"]


def _same(alone: train.RunResult, stacked: train.RunResult, labels: dict) -> None:
    for field in ("train_loss", "val_loss", "test_loss", "val_acc", "test_acc", "n_params", "model_info", "dead_units",
                  "saturated_units"):
        assert repr(getattr(alone, field)) == repr(getattr(stacked, field)), (field, labels)


def test_act_layer_members_equal_their_runs_alone_bitwise_with_batch_norm_dropout_and_shuffling():
    # two activations x two seeds: batch norm, nn.Dropout (each member's own stream), reshuffled
    # minibatches, AdamW, the cosine schedule and per-member clipping
    results = stacked_and_alone([*ACT, "activation=relu,silu", "seed=0,1", "shuffle=true", "weight_decay=0.1",
                                 "schedule=cosine", "warmup_steps=2", "grad_clip=0.5"])
    assert len(results) == 4
    for labels, alone, stacked in results:
        _same(alone, stacked, labels)
        assert stacked.stack_size == 2 and alone.stack_size == 1
        assert all(math.isfinite(v) for v in alone.train_loss)
        assert alone.model_info == {"activation_sites": {"way": "act_arg", "via": "act_layer", "modules": 2},
                                    "depth": 2, "output": "tensor",
                                    "code": {"target": f"{M}:ActNet", "file": "tests/module_models.py",
                                             "sha256": MODELS_SHA256,
                                             "files": {"tests/module_models.py": MODELS_SHA256}}}
    by = {(lab["activation"], lab["seed"]): alone.train_loss for lab, alone, _ in results}
    assert by[("relu", "0")] != by[("silu", "0")]  # the activation reached the model
    assert by[("relu", "0")] != by[("relu", "1")]
    # the parameter count is the module's own
    net = __import__(M, fromlist=["ActNet"]).ActNet()
    assert results[0][1].n_params == sum(p.numel() for p in net.parameters())


def test_replace_members_equal_alone_with_learnable_activations():
    # a hard-coded nn.ReLU model on a table: prelu (its own weights per site), rrelu (random slopes: the
    # member's own generator)
    grid = [*REPLACE, "activation=relu,prelu,tanh,rrelu", "seed=3"]
    results = stacked_and_alone(grid)
    for labels, alone, stacked in results:
        _same(alone, stacked, labels)
        assert alone.model_info["activation_sites"] == {"way": "replace", "via": "torch.nn.ReLU", "modules": 2}
    losses = {lab["activation"]: alone.train_loss for lab, alone, _ in results}
    assert len({tuple(v) for v in losses.values()}) == 4
    params = {lab["activation"]: alone.n_params for lab, alone, _ in results}
    assert params["prelu"] == params["relu"] + 2  # one fresh PReLU (one weight) per replaced site


def test_lazy_modules_get_their_parameters_from_the_members_seed_and_equal_alone():
    """nn.LazyConv2d, LazyBatchNorm2d and LazyLinear get their shapes from a forward on zeros of the
    data's shape, drawn from the member's "init" stream as a module built alone would be, with the
    running statistics untouched; members equal their runs alone bit for bit."""
    from activation_bench.data.synthetic import derived_seed
    from activation_bench.engine.models import user_module
    from tests.module_models import Lazy

    grid = ["model=module", f"model.target={M}:Lazy", "model.replace=[ReLU]", "data=digits", "data.n_train=150",
            "epochs=2", "batch_size=64", "shuffle=true", "activation=relu,silu", "seed=0,1"]
    results = stacked_and_alone(grid)
    for labels, alone, stacked in results:
        _same(alone, stacked, labels)
    by = {(lab["activation"], lab["seed"]): alone for lab, alone, _ in results}
    assert by[("relu", "0")].train_loss != by[("relu", "1")].train_loss
    assert by[("relu", "0")].n_params == 4 * 9 + 4 + 2 * 4 + 4 * 64 * 10 + 10

    cfg = compose([*grid[:-2], "activation=relu", "seed=1"])
    got = user_module.member(cfg, "cpu", torch.float32, user_module.sample_rows((1, 8, 8), False)).net
    torch.manual_seed(derived_seed(1, "init"))
    want = Lazy()
    want.eval()
    want(torch.zeros(2, 1, 8, 8))
    assert got.training and got.bn.training and got.drop.training
    assert [n for n, _ in got.named_parameters()] == [n for n, _ in want.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(got.parameters(), want.parameters()))
    assert int(got.bn.num_batches_tracked) == 0 and torch.equal(got.bn.running_mean, torch.zeros(4))


def test_first_member_equals_a_plain_pytorch_loop():
    """A member starts from the module its seed builds and trains as torch.optim.Adam would."""
    from activation_bench.data import splits
    from activation_bench.data.synthetic import derived_seed
    from tests.module_models import Fixed

    cfg = compose([*REPLACE, "activation=tanh", "seed=5", "batch_size=null"])
    (res,) = train.train([cfg])
    torch.manual_seed(derived_seed(5, "init"))
    net = Fixed()
    net.body[1], net.body[3] = torch.nn.Tanh(), torch.nn.Tanh()
    opt = torch.optim.Adam(net.parameters(), lr=0.01, fused=True)
    data = splits.make_dataset(cfg)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(data.x), data.y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert res.train_loss == pytest.approx(losses, rel=1e-5)


def test_run_writes_activation_sites_and_trains_sequences_and_text(runner, tmp_path):
    (tmp_path / "tiny.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40)
    runs = tmp_path / "runs"
    cases = [
        [f"model.target={M}:Seq1d", "model.act_arg=act_layer", "data=mnist1d", "data.n_train=60", "activation=gelu"],
        [f"model.target={M}:TinyLM", "model.act_arg=act_layer", "data=text", f"data.path={tmp_path / 'tiny.txt'}",
         "data.block_size=8", "data.steps=2", "data.eval_windows=4", "batch_size=4", "+model.kwargs.vocab=28",
         "activation=expr", 'activation.fn="x*sigmoid(beta*x)"', "+activation.beta=1.0", "activation.learnable=true"],
    ]
    for i, case in enumerate(cases):
        result = runner.invoke(app, ["run", "--runs-dir", str(runs), "--name", f"r{i}", "model=module", "epochs=1",
                                     *case])
        assert result.exit_code == 0, result.output
        assert "activation sites" in result.output and "1 module built through act_layer" in result.output
        summary = json.loads((runs / f"r{i}" / "summary.json").read_text())
        assert summary["activation_sites"]["modules"] == 1
        assert summary["status"] == "complete" and summary["n_params"] > 0
    learned = json.loads((runs / "r1" / "summary.json").read_text())["learned"]  # the learnable expression's
    assert list(learned) == ["beta"] and len(learned["beta"]) == 1 and learned["beta"][0] != 1.0  # one site, trained


BAD = {
    "no-target": (["model=module", "model.act_arg=act_layer"], "needs model.target=module:attribute"),
    "no-way": (["model=module", f"model.target={M}:ActNet"], "needs model.act_arg=NAME"),
    "both": ([*ACT, "model.replace=[torch.nn.ReLU]"], "give one"),
    "not-importing": (["model=module", "model.target=no_such_module_67:Net", "model.act_arg=act_layer"],
                      "does not import: ModuleNotFoundError: No module named 'no_such_module_67'"),
    "missing-attr": (["model=module", f"model.target={M}:Nope", "model.act_arg=act_layer"],
                     "does not import: AttributeError"),
    "not-callable": (["model=module", f"model.target={M}:NOT_CALLABLE", "model.act_arg=act_layer"],
                     "not a class or a function"),
    "not-a-module": (["model=module", f"model.target={M}:not_a_module", "model.act_arg=act_layer"],
                     "gave a int, not a torch.nn.Module"),
    "rejects-act-arg": (["model=module", f"model.target={M}:Fixed", "model.act_arg=act_layer", "data=iris"],
                        "unexpected keyword argument 'act_layer'"),
    "rejects-kwarg": ([*ACT, "+model.kwargs.depth=3"], "unexpected keyword argument 'depth'"),
    "act-arg-unused": (["model=module", f"model.target={M}:Ignores", "model.act_arg=act_layer", "data=iris"],
                       "never called model.act_arg=act_layer: no activation module was built through it (the model "
                       "may fix its activation itself; it holds torch.nn.ReLU x 2: try model.replace)"),
    "replace-nothing": ([*REPLACE, "model.replace=[torch.nn.GELU]"],
                        "matched no module of model.target 'tests.module_models:Fixed'; it holds torch.nn.ReLU x 2"),
    "functional": (["model=module", f"model.target={M}:Functional", "model.replace=[ReLU]", "data=iris"],
                   "it holds torch.nn.Tanh x 1 (functional calls such as F.relu cannot be reached"),
    "replace-bad-type": ([*REPLACE, "model.replace=[torch.nn.functional.relu]"], "is not a torch.nn.Module class"),
    "raises": (["model=module", f"model.target={M}:Raises", "model.act_arg=act_layer", "data=iris"],
               "failed in a check forward on a batch of shape [2, 4]: RuntimeError: the model broke here"),
    "wrong-shape": ([*ACT, "+model.kwargs.n_out=3"], "the model's output has shape [2, 3]; 10 classes needs [2, 10]"),
    "wrong-input": ([*REPLACE, "data=digits"], "failed in a check forward on a batch of shape [2, 1, 8, 8]"),
    "gated": ([*ACT, "activation=swiglu"], "activation=swiglu is gated"),
    "grad-log": ([*ACT, "log.grad_norms=true"], "log.grad_norms needs the shipped families' layers"),
    "text-no-window": ([f"model.target={M}:TinyLM", "model=module", "model.act_arg=act_layer", "data=python_docs"],
                       "or data.block_size (model=module); model=module has none"),
    "text-no-batch": ([f"model.target={M}:TinyLM", "model=module", "model.act_arg=act_layer", "data=python_docs",
                       "data.block_size=8", "+model.kwargs.vocab=28"],
                      "data=python_docs is text, trained on random windows: set batch_size (windows per member"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_exit_2_nothing_written(runner, runs_dir, case):
    args, message = BAD[case]
    assert_refused_by_run_and_sweep(runner, runs_dir, args, message)
    assert files_under(runs_dir) == []


# --------------------------------------------------------------------------------------------
# every command on a user's module; checkpoints


@pytest.fixture(scope="module")
def module_sweep(tmp_path_factory: pytest.TempPathFactory):
    from typer.testing import CliRunner

    root = tmp_path_factory.mktemp("module") / "runs"
    args = ["sweep", "--runs-dir", str(root), "--name", "mod", "-q", "activation=relu,gelu", "lr=0.003,0.03",
            "seed=range(4)", "shuffle=false,true", *REPLACE[:4], "epochs=2", "batch_size=32"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return root / "mod"


def test_compare_tune_rank_report_plot_and_export_read_module_runs(runner, module_sweep, tmp_path, monkeypatch):
    from activation_bench.export.mlflow import collect
    from tests.conftest import leave_files_undrawn
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report.py draws)
    leave_files_undrawn(monkeypatch)  # plot's figure built, not drawn (test_plots draws)

    tuned = ["--metric", "early_stop", "--loss", "test_acc", "--tune", "lr", "--tune-seeds", "2",
             "--tune-on", "val_acc"]
    out = runner.invoke(app, ["compare", str(module_sweep), *tuned, "--format", "json"])
    assert out.exit_code == 0, out.output
    assert {row["activation"] for row in json.loads(out.stdout)["rows"]} == {"relu", "gelu"}
    ranked = runner.invoke(app, ["rank", str(module_sweep), *tuned, "--task", "shuffle"])
    assert ranked.exit_code == 0, ranked.output
    page = tmp_path / "report.html"
    report = runner.invoke(app, ["report", str(module_sweep), *tuned[:-2], "--tune-on", "val_acc", "-o", str(page)])
    assert report.exit_code == 0, report.output
    assert "tests.module_models:Fixed(), activation replacing torch.nn.ReLU" in page.read_text()
    assert (f"<dt>model code</dt><dd>tests.module_models:Fixed from tests/module_models.py, SHA-256 "
            f"{MODELS_SHA256[:12]}</dd>") in page.read_text()
    plot = runner.invoke(app, ["plot", str(module_sweep), "-o", str(tmp_path / "curves.png")])
    assert plot.exit_code == 0, plot.output
    plan = collect([module_sweep])
    assert len(plan.members) == 32 and plan.members[0].params["model"] == "module"
    assert plan.members[0].params["code.sha256"] == MODELS_SHA256
    assert plan.members[0].params["code.file"] == "tests/module_models.py"
    summary = json.loads(next(module_sweep.glob("*/summary.json")).read_text())
    assert summary["activation_sites"] == {"way": "replace", "via": "torch.nn.ReLU", "modules": 2}


def test_search_candidates_go_into_the_users_module(runner, runs_dir):
    out = runner.invoke(app, ["search", "--runs-dir", str(runs_dir), "--dry-run", "--candidates", "12",
                              *REPLACE[:4], "epochs=2", "--select-on", "val_acc"])
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize("extra", [["activation=rrelu", "log.preact_stats=1"],
                                   ["model.vmap=true", "+model.kwargs.dropout=0.0", "log.preact_stats=2"]])
def test_module_run_resumes_bit_for_bit(runner, tmp_path, monkeypatch, extra):
    from tests.test_checkpoint import _run, assert_same_outputs

    args = [*ACT, "shuffle=true", "epochs=3", *extra]
    assert _run(runner, tmp_path / "ref", args, monkeypatch).exit_code == 0
    assert _run(runner, tmp_path / "b", args, monkeypatch, "TERM@1.2").exit_code == 143
    assert _run(runner, tmp_path / "b", args, monkeypatch).exit_code == 0
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


# --------------------------------------------------------------------------------------------
# examples/: He et al.'s CIFAR ResNets and the CIFAR-10 study file


def test_cifar_resnets_have_the_papers_sizes():
    from examples.cifar_resnet import resnet20, resnet56

    sizes = [sum(p.numel() for p in f().parameters()) for f in (resnet20, resnet56)]
    assert sizes == [269_722, 853_018]  # 0.27M and 0.85M (the paper: 0.27M, 0.86M)
    assert resnet20()(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_cifar_study_is_planned_listing_the_code_it_imports(runner, tmp_path, monkeypatch):
    from tests.test_images import write_cifar

    write_cifar(tmp_path, per_batch=40)  # 200 training images: 160 after the validation split, batch 128
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(tmp_path))
    out = runner.invoke(app, ["study", "run", "examples/cifar10-resnet20.yaml", "--dry-run", "--runs-dir",
                              str(tmp_path / "runs"), "-o", str(tmp_path / "out")])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("imports (runs the code of): examples.cifar_resnet (model.target)\n")
    assert "48 of the full grid's 96 members" in out.output  # tuned (judge: chosen): seeds 0-1 tune, 2-7 judge
    assert "48 members to train" in out.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


def test_cifar_study_recipe_trains_resnet20_on_the_cpu_each_member_its_run_alone(tmp_path, monkeypatch):
    # the study file's own overrides (SGD with Nesterov momentum, cosine with warmup, shuffled batches
    # of 128) on CIFAR-format files written here, one epoch on the CPU: the example trains, not only plans
    import yaml

    from tests.test_images import write_cifar

    write_cifar(tmp_path, per_batch=8)  # 40 training images: 32 after the validation split (two batches of 16)
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(tmp_path))
    study = yaml.safe_load(open("examples/cifar10-resnet20.yaml", encoding="utf-8"))
    recipe = study["sweeps"]["resnet20-cifar10"]["overrides"]
    assert "device=cuda" in recipe and "epochs=160" in recipe
    recipe = [o for o in recipe if o not in ("device=cuda", "epochs=160")]
    results = stacked_and_alone([*recipe, "device=cpu", "epochs=1", "batch_size=16", "warmup_steps=1",
                                 "activation=relu,mish", "lr=0.1", "seed=2"])
    for labels, alone, stacked in results:
        _same(alone, stacked, labels)
        assert alone.model_info["activation_sites"] == {"way": "act_arg", "via": "act_layer", "modules": 19}
        assert alone.n_params == 269_722 and math.isfinite(alone.train_loss[-1])
        assert 0.0 <= alone.test_acc[-1] <= 1.0
    assert results[0][1].train_loss != results[1][1].train_loss  # the activation reached all 19 sites


# --------------------------------------------------------------------------------------------
# model.vmap=true: one torch.func stack, equal to the members' runs alone within a tolerance

VMAP_TOLERANCE = 1e-3  # relative, on every epoch's losses (docs/your-own-model.md: measured 2e-4 at 51 steps)


def test_vmap_members_agree_with_their_runs_alone_within_the_stated_tolerance():
    from activation_bench.config.compose import compose_many

    grid = [*ACT, "+model.kwargs.dropout=0.0", "weight_decay=0.1", "grad_clip=0.5"]
    cfgs = compose_many([[*grid, f"activation={a}", f"seed={s}", f"model.vmap={v}"]
                         for v in ("true", "false") for a in ("relu", "prelu") for s in (0, 1)])
    stacked = train.train(cfgs[:2]) + train.train(cfgs[2:4])  # vmap: two stacks of two (one per activation)
    alone = [train.train([c])[0] for c in cfgs[4:]]  # members one after another, each alone
    for v, a in zip(stacked, alone):
        assert v.stack_size == 2 and v.n_params == a.n_params and v.model_info == a.model_info
        for key in ("train_loss", "val_loss", "test_loss"):
            assert getattr(v, key) == pytest.approx(getattr(a, key), rel=VMAP_TOLERANCE), key
    assert stacked[0].train_loss != stacked[2].train_loss  # relu and prelu differ


def test_vmap_refuses_random_draws_in_one_line(runner, runs_dir):
    assert_refused_by_run_and_sweep(runner, runs_dir, [*ACT, "model.vmap=true"],
                                    "model.vmap=true cannot run model.target 'tests.module_models:ActNet': it draws "
                                    "random numbers")
    assert_refused_by_run_and_sweep(runner, runs_dir, [*REPLACE, "model.vmap=true", "activation=rrelu"],
                                    "it draws random numbers")


def test_every_elementwise_registered_activation_and_a_target_one_go_in(runner, tmp_path):
    """Each registered activation (the gated ones refused, saying why) builds, is counted and runs
    the check forward; a user's _target_ activation trains."""
    from activation_bench.config.compose import compose
    from activation_bench.engine.activations import registry as activations
    from activation_bench.engine.models import user_module
    from activation_bench.errors import UsageError

    for name in activations.names():
        args = [*REPLACE, f"activation={name}"]
        if activations.get_spec(name).gated:
            with pytest.raises(UsageError, match="is gated"):
                compose(args)
            continue
        assert user_module.probe(compose(args)).sites.modules == 2, name
    result = runner.invoke(app, ["run", "--runs-dir", str(tmp_path), "--name", "t", *REPLACE, "activation=custom",
                                 "activation._target_=torch.nn.Softsign"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "t" / "summary.json").read_text())["activation_sites"]["modules"] == 2


def test_act_arg_passes_a_class_that_models_can_test_as_one():
    """model.act_arg's value is a class (issubclass, isinstance(type) hold) whose call builds a fresh
    activation module, its own every time; members still equal their runs alone."""
    from activation_bench.engine.models import user_module

    args = ["model=module", f"model.target={M}:Checks", "model.act_arg=act_layer", "data=iris", "epochs=2",
            "batch_size=32"]
    for labels, alone, stacked in stacked_and_alone([*args, "activation=gelu,tanh", "seed=0,1"]):
        _same(alone, stacked, labels)
        assert alone.model_info["activation_sites"]["modules"] == 1
    net, sites = user_module.construct({"target": f"{M}:Checks", "act_arg": "act_layer"}, {"name": "prelu"})
    assert type(net.act) is torch.nn.PReLU and sites.modules == 1


# --------------------------------------------------------------------------------------------
# the user's code, recorded: summary.json's `code`, checkpoints and sweeps that do not mix versions

EDITED = """\
from functools import partial

from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x):
        return self.body(x)


net = partial(Net)
"""


def _edit(path, text: str, monkeypatch) -> None:
    """The model file rewritten, and this process made to see it as a new process would."""
    from activation_bench.engine.models import user_code

    path.write_text(text)
    user_code._code_json.cache_clear()
    monkeypatch.delitem(sys.modules, path.stem, raising=False)


@pytest.fixture
def model_file(request, tmp_path, monkeypatch):
    """A model file of the working directory, named for the test (each its own module), as written
    by EDITED; grid: the overrides that train it on iris."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = tmp_path / f"edited_{request.node.name[5:25]}.py"
    _edit(path, EDITED, monkeypatch)
    grid = ["model=module", f"model.target={path.stem}:Net", "model.replace=[ReLU]", "data=iris", "epochs=3",
            "batch_size=32"]
    return path, grid


def test_runs_record_the_models_code_and_a_sweep_never_mixes_two_versions(runner, tmp_path, monkeypatch, model_file):
    from activation_bench.engine.models import user_code

    model, grid = model_file
    target = grid[1].split("=")[1]
    sweep = ["sweep", "--runs-dir", "runs", "--name", "s", "-q", *grid, "activation=gelu,relu", "seed=0,1"]
    assert runner.invoke(app, sweep).exit_code == 0
    runs = sorted(p for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir())
    first = hashlib.sha256(model.read_bytes()).hexdigest()
    for run in runs:
        code = json.loads((run / "summary.json").read_text())["code"]
        assert code == {"target": target, "file": model.name, "sha256": first, "files": {model.name: first}}

    # one member to train again, the model edited: refused in one line, nothing trained or written
    shutil.rmtree(runs[-1])
    _edit(model, EDITED.replace("nn.Linear(4, 8)", "nn.Linear(4, 8, bias=False)"), monkeypatch)
    before = files_under(tmp_path / "runs")
    result = runner.invoke(app, sweep)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert "\n" not in err, err
    assert f"3 finished member(s) ran other code of model.target '{target}' ({model.name} changed since)" in err, err
    assert "mix two versions" in err, err
    assert files_under(tmp_path / "runs") == before
    # --force trains every member again under the new code
    assert runner.invoke(app, [*sweep, "--force"]).exit_code == 0
    now = hashlib.sha256(model.read_bytes()).hexdigest()
    assert {json.loads((r / "summary.json").read_text())["code"]["sha256"] for r in runs} == {now}
    # a saved config re-run under other code says so
    result = runner.invoke(app, ["run", "--runs-dir", "runs", "-q", "--config", str(runs[0] / "config.yaml")])
    assert result.exit_code == 0 and "other code of model.target" not in result.stderr
    _edit(model, EDITED + "# edited\n", monkeypatch)
    result = runner.invoke(app, ["run", "--runs-dir", "runs", "-q", "--config", str(runs[0] / "config.yaml")])
    assert result.exit_code == 0
    assert f"was trained with other code of model.target ({model.name} changed since)" in result.stderr
    # a target without a source of its own (a functools.partial) records its module's file
    assert dict(user_code.code_record(f"{model.stem}:net"))["file"] == model.name
    # an installed distribution's target records its version
    torch_code = dict(user_code.code_record("torch.nn:Linear"))
    assert torch_code["distribution"] == "torch" and torch_code["version"] == torch.__version__


def test_a_checkpoint_written_by_other_code_of_the_model_is_not_used(runner, tmp_path, monkeypatch, model_file):
    from tests.test_checkpoint import _run

    model, grid = model_file
    args = [*grid, "shuffle=true"]
    assert _run(runner, tmp_path / "b", args, monkeypatch, "TERM@1.2").exit_code == 143
    _edit(model, EDITED + "# edited\n", monkeypatch)
    result = _run(runner, tmp_path / "b", args, monkeypatch)
    assert result.exit_code == 0, result.output
    assert f"written by other code of model.target ({model.name} changed); starting over" in result.stderr
    assert _run(runner, tmp_path / "ref", args, monkeypatch).exit_code == 0
    # started over under the new code: the same losses as a run of it from nothing
    assert (tmp_path / "b" / "r" / "losses.csv").read_text() == (tmp_path / "ref" / "r" / "losses.csv").read_text()


def test_the_code_record_follows_the_models_imports_within_the_working_directory(tmp_path, monkeypatch):
    """A model in a package: the files its imports reach under the working directory are recorded
    (not a module it never imports); an edit of one of them is a change, named; of another, none."""
    from activation_bench.engine.models import user_code

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    pkg = tmp_path / "recorded_pkg"
    pkg.mkdir()
    files = {"__init__.py": "from .net import Net\n",
             "net.py": "from torch import nn\n\nfrom . import layers\nfrom recorded_pkg.layers import width\n\n\n"
                       "class Net(nn.Module):\n    def __init__(self, act_layer=nn.ReLU):\n        super().__init__()\n"
                       "        self.body = layers.body(act_layer, width)\n\n    def forward(self, x):\n"
                       "        return self.body(x)\n",
             "layers.py": "from torch import nn\n\nwidth = 8\n\n\ndef body(act, w):\n"
                          "    return nn.Sequential(nn.Linear(4, w), act(), nn.Linear(w, 3))\n",
             "unrelated.py": "x = 1\n"}
    for name, text in files.items():
        (pkg / name).write_text(text)
    before = user_code.code_record("recorded_pkg:Net")
    assert before["file"] == "recorded_pkg/net.py"
    assert set(before["files"]) == {"recorded_pkg/__init__.py", "recorded_pkg/net.py", "recorded_pkg/layers.py"}
    (pkg / "unrelated.py").write_text("x = 2\n")
    user_code._code_json.cache_clear()
    assert user_code.code_change(before, user_code.code_record("recorded_pkg:Net")) is None
    (pkg / "layers.py").write_text(files["layers.py"].replace("width = 8", "width = 16"))
    user_code._code_json.cache_clear()
    assert user_code.code_change(before, user_code.code_record("recorded_pkg:Net")) == "recorded_pkg/layers.py changed"
    # installed packages and the standard library are never the user's code, wherever the run starts
    assert user_code._local_module("torch.nn", Path("/")) is None and user_code._local_module("json", Path("/")) is None
    timm = {"target": "timm:create_model", "file": "/x/timm/_factory.py", "sha256": "a", "distribution": "timm",
            "version": "1.0.9"}
    assert user_code.code_change(timm, {**timm, "version": "1.0.11"}) == "timm 1.0.9 -> 1.0.11"
    for name in [m for m in sys.modules if m.startswith("recorded_pkg")]:
        monkeypatch.delitem(sys.modules, name)
