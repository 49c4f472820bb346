"""engine=compiled|auto: the key's validation and hash, the auto rule, the fallback to eager (one
line, a complete run), and (slow: they compile) agreement with the eager engine within RTOL and
the same bits in two fresh processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from activation_bench.cfg import Cfg
from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.config.grid import expand
from activation_bench.config.hashing import config_hash
from activation_bench.engine import plan, train
from activation_bench.engine.activations.registry import create
from activation_bench.engine.compiled import build as compiled_build
from activation_bench.engine.compiled import choose as compiled
from activation_bench.engine.compiled import cnn as compiled_cnn
from activation_bench.engine.compiled import mlp as compiled_mlp
from activation_bench.engine.compiled import store as compile_store
from activation_bench.engine.models import registry
from tests.conftest import TINY, assert_refused_by_run_and_sweep

# the compiled engine against the eager one, every epoch's loss (docs/reproducibility.md)
RTOL, ATOL = 1e-4, 1e-7
ROOT = Path(__file__).resolve().parent.parent
needs_compiler = pytest.mark.skipif(compiled.compiler_missing() is not None, reason="no C++ compiler")


def _train(overrides: list[str]) -> list[train.RunResult]:
    """Every member of the grid, trained in its sweep's stacks, in grid order."""
    cfgs = compose_many(expand(overrides).members)
    out: dict[int, train.RunResult] = {}
    for stack in plan.plan_stacks(cfgs):
        out.update(zip(stack, train.train([cfgs[i] for i in stack])))
    return [out[i] for i in range(len(cfgs))]


def test_unknown_engine_is_refused(runner, runs_dir):
    message = "unknown engine 'jit'; valid: eager, compiled, auto"
    assert_refused_by_run_and_sweep(runner, runs_dir, ["engine=jit"], message)


def test_eager_and_the_default_auto_keep_the_hash_of_configs_made_before_the_key():
    cfg = compose([])
    assert cfg.engine == "auto"
    before = Cfg({k: v for k, v in cfg.items() if k != "engine"})
    assert config_hash(cfg) == config_hash(before) == config_hash(compose(["engine=eager"]))
    assert config_hash(compose(["engine=compiled"])) != config_hash(cfg)


def test_auto_compiles_where_eager_time_is_several_times_the_compile_cost():
    threshold = compiled.AUTO_FACTOR * compiled.COMPILE_COST_S
    assert compiled.choose("auto", threshold * 0.9)[0] == "eager"
    assert compiled.choose("auto", threshold)[0] == "compiled"
    assert compiled.choose("compiled", 0.0) == ("compiled", "requested")
    # 240 members of the reference model (64 inputs, 64 hidden, 1 output, 10 rows): eager at 100k
    # model-steps/s, so compiled from 50k epochs
    mlp = registry.family("mlp")
    macs = mlp.macs(compose([]))
    assert macs == (64 + 1) * 64 == compiled.REF_WORK // 10
    ref = compiled.work_s(240, 1000, 10 * macs)
    assert ref == pytest.approx(240 * 1000 / compiled.REF_STEPS_PER_S)
    assert compiled.work_s(240, 1000, 20 * macs) == pytest.approx(2 * ref)
    # deeper members: (depth - 1) more hidden x hidden layers of work (64 + 64 + 1 against 64 + 1)
    assert mlp.macs(compose(["model.depth=2"])) == 129 * 64
    assert compiled.choose("auto", compiled.work_s(240, 50_000, 10 * macs))[0] == "compiled"
    assert compiled.choose("auto", compiled.work_s(240, 49_000, 10 * macs))[0] == "eager"


def test_auto_counts_a_convnets_convolutions_as_their_im2col_products():
    cfg = compose(["model=cnn", "data=mnist1d", "engine=auto", "batch_size=100", "epochs=2"])
    # MNIST-1D's CNN: 19, 10 and 5 positions of 5, 75 and 75 inputs to 25 channels, then 125 -> 10
    assert registry.of(cfg).macs(cfg) == 19 * 5 * 25 + 10 * 75 * 25 + 5 * 75 * 25 + 125 * 10
    assert plan.planned_engine([cfg] * 80) == ("eager", "auto: estimated eager time 3.9 s < 120 s")
    long = compose(["model=cnn", "data=mnist1d", "engine=auto", "batch_size=100", "epochs=100"])
    assert plan.planned_engine([long] * 80)[0] == ("compiled" if compiled.compiler_missing() is None else "eager")


def test_a_tiny_run_with_auto_stays_eager_and_says_nothing_but_records_it(runner, runs_dir):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "engine=auto", *TINY])
    assert result.exit_code == 0, result.output
    assert "engine" not in result.stderr
    run = next(runs_dir.iterdir())
    assert json.loads((run / "summary.json").read_text())["engine"] == "eager"
    assert yaml.safe_load((run / "config.yaml").read_text())["engine"] == "eager"
    shown = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "engine=compiled", "optimizer=sgd",
                                "momentum=0.9", *TINY])
    assert shown.exit_code == 0, shown.output
    assert any(ln.split() == ["│", "engine", "│", "eager", "│"] for ln in shown.stdout.splitlines()), shown.stdout
    assert "engine eager for a stack of 1 member (compiled engine not used: its step has plain Adam" in shown.stderr


def test_the_default_engine_says_nothing(runner, runs_dir):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *TINY])
    assert result.exit_code == 0, result.output
    assert "engine" not in result.stderr
    assert json.loads((next(runs_dir.iterdir()) / "summary.json").read_text())["engine"] == "eager"


def test_auto_takes_the_compiled_step_where_this_machine_has_it_saved(runner, runs_dir, monkeypatch):
    # the store in memory: "compiling" saves the step's Python function under its key (it runs
    # eagerly), "loading" finds it; what is tested is which engine auto picks, and its record
    saved: dict[str, object] = {}

    def compile_and_save(fn, args, root, key):
        saved[key] = fn
        compile_store.folder(root).mkdir(parents=True, exist_ok=True)
        (compile_store.folder(root) / f"{key}-0.pt2").write_bytes(b"")  # the store is not empty
        return fn

    monkeypatch.setattr(compile_store, "load", lambda root, key: saved.get(key))
    monkeypatch.setattr(compile_store, "compile_and_save", compile_and_save)
    monkeypatch.setenv("ACTBENCH_AUTO_STORE", "on")

    def sweep(name: str, *extra: str) -> tuple[str, list[tuple[str, str, str]]]:
        result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "--name", name,
                                     "activation=gelu,relu", "seed=0,1", *TINY, *extra])
        assert result.exit_code == 0, result.output
        runs = sorted(d for d in (runs_dir / name).iterdir() if d.is_dir() and not d.name.startswith("."))
        return result.stderr, [(yaml.safe_load((r / "config.yaml").read_text())["engine"],
                                json.loads((r / "summary.json").read_text())["config_hash"],
                                (r / "losses.csv").read_text()) for r in runs]

    said, cold = sweep("cold")  # nothing saved: eager, nothing compiled, the stack not padded
    assert not saved and "engine" not in said
    _, eager = sweep("eager", "engine=eager")
    assert cold == eager and {engine for engine, _, _ in cold} == {"eager"}
    _, asked = sweep("compiled", "engine=compiled")
    assert len(saved) == 1  # the step (no validation split to evaluate)
    said, warm = sweep("warm")
    assert len(saved) == 1  # loaded, not compiled again
    assert "engine compiled for a stack of 4 members (auto: its compiled step is saved on this machine)" in said
    assert [(e, losses) for e, _, losses in warm] == [(e, losses) for e, _, losses in asked]
    assert {e for e, _, _ in warm} == {"compiled"}
    assert [h for _, h, _ in warm] == [h for _, h, _ in cold]  # auto's hash, whichever engine ran
    # a sweep whose auto members trained eager resumes eager, though its step is saved by now
    for run in (runs_dir / "cold").iterdir():
        if run.is_dir() and run.name.endswith("seed=1"):
            shutil.rmtree(run)
    said, resumed = sweep("cold")
    assert "engine" not in said and resumed == cold
    monkeypatch.setenv("ACTBENCH_AUTO_STORE", "off")
    _, off = sweep("off")
    assert off == eager


def test_a_failed_compilation_falls_back_to_eager_with_one_line_and_a_whole_run(runner, runs_dir, monkeypatch):
    def fail(*args):
        raise RuntimeError("simulated failure\nsecond line")

    monkeypatch.setattr(compiled_build, "_compile", fail)
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "--name", "s", "engine=compiled",
                                 "activation=gelu,relu", "seed=0,1", *TINY])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("engine ")]
    assert lines == ["engine eager for a stack of 4 members (compiled engine not used: compilation failed "
                     "(RuntimeError: simulated failure); falling back to eager)"]
    eager = _train(["activation=gelu,relu", "seed=0,1", *TINY])
    runs = sorted(p for p in (runs_dir / "s").iterdir() if p.is_dir())
    assert len(runs) == 4
    for run, alone in zip(runs, eager):
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "complete" and summary["engine"] == "eager"
        assert yaml.safe_load((run / "config.yaml").read_text())["engine"] == "eager"
        losses = [float(r.split(",")[1]) for r in (run / "losses.csv").read_text().splitlines()[1:]]
        assert losses == alone.train_loss  # the fallback is the eager engine, bit for bit
    # resume: the same command finds every member done (config_hash is the one asked for)
    again = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "--name", "s", "engine=compiled",
                                "activation=gelu,relu", "seed=0,1", *TINY])
    assert again.exit_code == 0 and "engine " not in again.stderr


def test_without_a_compiler_the_stack_trains_eager(monkeypatch):
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    lines: list[str] = []
    cfg = compose(["engine=compiled", *TINY])
    result = train.train([cfg], notice=lines.append)[0]
    assert result.engine == "eager" and result.status == "complete"
    assert len(lines) == 1 and lines[0].startswith("engine eager for a stack of 1 member (compiled engine not used: "
                                                  "no C++ compiler found")


@needs_compiler
@pytest.mark.parametrize(("target", "why"), [
    ("act_helpers.NoisyTanh", "compilation failed"),  # draws from torch's global generator: vmap refuses it
    ("act_helpers.SignedTanh", "compilation failed"),  # branches on its input's values
    ("act_helpers.ShiftedTanh", "a user's module with buffers"),  # refused before anything compiles
])
def test_a_users_module_the_step_cannot_take_trains_eager(target, why, inductor_cache):
    lines: list[str] = []
    cfg = compose(["engine=compiled", *TINY, "activation=custom", f"activation._target_={target}"])
    result = train.train([cfg], notice=lines.append)[0]
    assert result.engine == "eager" and result.status == "complete"
    # a compilation that was tried is said once as it starts (never as compiled), then the fallback
    tried = ["compiling the step for inputs of shape "] if why == "compilation failed" else []
    assert [line[:len(t)] for line, t in zip(lines, tried)] == tried and len(lines) == len(tried) + 1
    assert why in lines[-1] and "falling back to eager" in lines[-1]


def test_a_users_module_source_names_its_compiled_code():
    import hashlib

    from activation_bench.engine.compiled import acts as compiled_acts

    cfgs = compose_many(expand(["engine=compiled", "activation=custom", "activation._target_=act_helpers.ScaledTanh",
                                "seed=0,1", *TINY]).members)
    stack = train._build(cfgs)
    helpers = hashlib.sha256((ROOT / "tests" / "act_helpers.py").read_bytes()).hexdigest()
    # the package's identity holds the module's file: an edited module compiles again
    assert compiled_acts.code(stack.model) == [helpers]
    plain = train._build(compose_many(expand(["engine=compiled", "seed=0,1", *TINY]).members))
    assert compiled_acts.code(plain.model) == []


def test_members_the_compiled_engine_cannot_take_get_stacks_of_their_own():
    cfgs = compose_many(expand(["engine=compiled", "activation=gelu,prelu,rrelu,stochastic_gelu", "seed=0,1",
                                *TINY]).members)
    custom = compose_many(expand(["engine=compiled", "activation=custom", "activation._target_=torch.nn.Tanh",
                                  "seed=0,1", *TINY]).members)
    members = [*cfgs, *custom]
    stacks = sorted(sorted(members[i].activation.name for i in s) for s in plan.plan_stacks(members))
    # prelu's learned slope and the random draws of rrelu and stochastic_gelu are compiled
    # (compiled_acts); a user's module is not
    assert stacks == [["custom", "custom"],
                      ["gelu", "gelu", "prelu", "prelu", "rrelu", "rrelu", "stochastic_gelu", "stochastic_gelu"]]
    eager = compose_many(expand(["activation=gelu,prelu", "seed=0,1", *TINY]).members)
    assert len(plan.plan_stacks(eager)) == 1  # the eager engine's stacks are as before


def test_engines_never_share_a_stack():
    cfgs = compose_many(expand(["engine=eager,compiled", "seed=0,1", *TINY]).members)
    assert sorted(sorted(s) for s in plan.plan_stacks(cfgs)) == [[0, 1], [2, 3]]


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory):
    """One inductor cache folder for this module's compiled tests (not the user's)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
        yield


GRIDS = {
    "full batch": ["activation=gelu,relu,tanh,mish", "seed=0,1", "epochs=30", "data.n_samples=8", "data.input_dim=4",
                   "model.hidden_dim=6", "lr=0.01", "log.preact_stats=10"],
    "minibatch": ["activation=gelu,silu", "seed=0,1", "epochs=10", "data=function", "data.fn=exp_sin",
                  "model.hidden_dim=6", "batch_size=16", "shuffle=true", "lr=0.01"],
    # torch.func.vjp of the forward inside the compiled step: expressions (one grouped module) and gated units
    "expressions and gated": ["activation=expr,swiglu", 'activation.fn="x*sigmoid(1.5*x)","sin(x)+x"', "seed=0,1",
                              "epochs=20", "data.n_samples=8", "data.input_dim=4", "model.hidden_dim=6", "lr=0.01"],
    # log.grad_norms: the step returns the norms (the depth-1 MLP's too, through torch.func.vjp)
    "sgd": ["activation=gelu,relu,tanh", "seed=0,1", "epochs=30", "data.n_samples=8", "data.input_dim=4",
            "model.hidden_dim=6", "optimizer=sgd", "lr=0.05", "log.grad_norms=true", "log.every=7"],
    "float64": ["activation=gelu,relu,tanh", "seed=0,1", "epochs=30", "data.n_samples=8", "data.input_dim=4",
                "model.hidden_dim=6", "dtype=float64", "lr=0.01"],
    "classification": ["activation=relu,elu", "seed=0,1", "epochs=10", "data=iris", "model.hidden_dim=6",
                       "batch_size=32", "shuffle=true", "lr=0.01"],
    # activations with learned parameters, stacked per run of members, and the draws of rrelu and
    # stochastic_gelu taken as inputs (compiled_acts.py), beside a plain one
    "learned and random": ["activation=prelu,expr,gelu,rrelu,stochastic_gelu", 'activation.fn="x*sigmoid(beta*x)"',
                           "+activation.beta=1.0", "activation.learnable=true", "seed=0,1", "epochs=30",
                           "data.n_samples=8", "data.input_dim=4", "model.hidden_dim=6", "model.depth=2", "lr=0.01"],
    # a user's modules, each member's called on its own rows through torch.func.vmap: without
    # parameters, with a learned one per unit (stacked [members, units]), one not elementwise
    "user's modules": ["activation=custom", "activation._target_=act_helpers.ScaledTanh,act_helpers.LearnedSlope,"
                       "act_helpers.RowCentred", "seed=0,1", "epochs=20", "data.n_samples=8", "data.n_val=8",
                       "data.input_dim=4", "model.hidden_dim=6", "model.depth=2", "lr=0.01"],
    # compiled_mlp.py's step (the forward differentiated by torch.func): depth > 1, norms, dropout, skips;
    # the validation loss reads batch norm's running statistics, which the compiled step updates
    "deep, batch norm, residual": ["activation=gelu,relu,swiglu", "seed=0,1", "epochs=20", "data.n_samples=8",
                                   "data.n_val=8", "data.input_dim=4", "model.hidden_dim=6", "model.depth=3",
                                   "model.norm=batch", "model.residual=true", "lr=0.01", "log.preact_stats=5",
                                   "log.grad_norms=true", "log.every=5"],
    "layer norm and dropout": ["activation=tanh,mish", "seed=0,1", "epochs=20", "data.n_samples=8", "data.input_dim=4",
                               "model.hidden_dim=6", "model.depth=2", "model.norm=layer", "model.dropout=0.2",
                               "lr=0.01"],
    "deep classifier with dropout": ["activation=relu,elu", "seed=0,1", "epochs=10", "data=iris", "model.hidden_dim=6",
                                     "model.depth=2", "model.dropout=0.1", "batch_size=32", "shuffle=true",
                                     "lr=0.01"],
    # compiled_cnn.py's step: 2-D convolutions with batch norm and max pooling, 1-D ones with gated
    # units, a learned slope (prelu), random slopes (rrelu) and masks (stochastic_gelu) beside dropout,
    # average and global pooling
    "2-D convnet, batch norm, max pool": ["model=cnn", "data=digits", "data.n_train=200", "model.channels=[4,6]",
                                          "model.kernel=[3,3]", "model.stride=[1,1]", "model.padding=[1,0]",
                                          "model.norm=batch", "model.pool=max", "activation=relu,gelu", "seed=0,1",
                                          "epochs=3", "batch_size=64", "shuffle=true", "lr=0.01",
                                          "log.preact_stats=1", "log.grad_norms=true", "log.every=1"],
    "1-D convnet, gated, dropout, global pool": ["model=cnn", "data=mnist1d", "data.n_train=200",
                                                 "model.channels=[4,4]", "model.kernel=[5,3]", "model.stride=[2,2]",
                                                 "model.padding=[1,1]", "model.pool=avg", "model.global_pool=true",
                                                 "model.dropout=0.2",
                                                 "activation=swiglu,tanh,prelu,rrelu,stochastic_gelu",
                                                 "seed=0,1",
                                                 "epochs=2", "batch_size=100", "shuffle=true", "lr=0.01"],
}


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("grid", GRIDS)
def test_compiled_agrees_with_eager_and_alone(grid, inductor_cache):
    overrides = GRIDS[grid]
    eager = _train(overrides)
    fast = _train(["engine=compiled", *overrides])
    alone = train.train([compose_many(expand(["engine=compiled", *overrides]).members)[0]])[0]
    for e, c in zip(eager, fast):
        assert c.engine == "compiled" and e.engine == "eager"
        for col in ("train_loss", "val_loss", "test_loss", "val_acc"):
            want, got = getattr(e, col), getattr(c, col)
            assert (want is None) == (got is None)
            if want is not None:
                assert got == pytest.approx(want, rel=RTOL, abs=ATOL), col
        if e.learned is not None:  # the learned parameters, read through the eager modules' views
            assert c.learned is not None and c.learned.keys() == e.learned.keys()
            for name in e.learned:
                assert c.learned[name] == pytest.approx(e.learned[name], rel=RTOL, abs=ATOL)
        else:
            assert c.learned is None
        # log.preact_stats (the eager probe on the compiled step's parameters) and log.grad_norms
        for log, keys in (("preact", 3), ("grads", 2)):
            want, got = getattr(e, log), getattr(c, log)
            assert (want is None) == (got is None), log
            if want is not None:
                assert [r[:keys] for r in got] == [r[:keys] for r in want], log
                want, got = [v for r in want for v in r[keys:]], [v for r in got for v in r[keys:]]
                assert [math.isnan(v) for v in got] == [math.isnan(v) for v in want], log
                assert [v for v in got if not math.isnan(v)] == pytest.approx(
                    [v for v in want if not math.isnan(v)], rel=RTOL, abs=ATOL), log
    assert alone.train_loss == pytest.approx(fast[0].train_loss, rel=RTOL, abs=ATOL)


@pytest.mark.slow
@needs_compiler
def test_a_compiled_convnet_evaluates_in_parts_of_one_shape(monkeypatch, inductor_cache):
    from activation_bench.engine import diagnostics

    cfg = compose_many(expand(["engine=compiled", *GRIDS["1-D convnet, gated, dropout, global pool"]]).members)[0]
    monkeypatch.setattr(diagnostics, "SHARE_BYTES", 1 << 40)  # every split in one part
    whole = train.train([cfg])[0]
    # 300 rows a part: 2 members x 95 values a row (the first block's 19 positions x 5 inputs) x 4 bytes
    monkeypatch.setattr(diagnostics, "SHARE_BYTES", 300 * 2 * 95 * 4)
    stack = train._build([cfg, cfg])
    assert [p[0].shape[1] for p in compiled_cnn.parts(stack.model, *stack.val)] == [267, 267, 267]  # 800 + 1 filler
    chunked = train.train([cfg])[0]
    assert chunked.engine == "compiled" and chunked.train_loss == whole.train_loss
    assert chunked.val_loss == pytest.approx(whole.val_loss, rel=1e-6)
    assert chunked.test_loss == pytest.approx(whole.test_loss, rel=1e-6)
    assert chunked.test_acc == whole.test_acc and chunked.dead_units == whole.dead_units


@pytest.mark.slow
@needs_compiler
def test_a_compiled_convnets_unit_shares_are_the_eager_passes(inductor_cache):
    # a large step size kills 7 of 8 ReLU channels in the second block, so there are shares to get right
    grid = ["model=cnn", "data=mnist1d", "data.n_train=200", "activation=relu,tanh,swiglu", "seed=0,1", "epochs=2",
            "batch_size=100", "lr=0.2", "model.channels=[8,8]", "model.kernel=[5,3]", "model.stride=[2,2]",
            "model.padding=[1,1]", "model.pool=max"]
    eager, fast = _train(grid), _train(["engine=compiled", *grid])
    assert max(r.dead_units[1] for r in fast) == 0.875
    for e, c in zip(eager, fast):
        assert c.engine == "compiled"
        assert c.dead_units == e.dead_units
        assert repr(c.saturated_units) == repr(e.saturated_units)  # NaN (gated units) == NaN


CHILD = """
import json, sys
from activation_bench.config.compose import compose_many
from activation_bench.config.grid import expand
from activation_bench.engine import train
cfgs = compose_many(expand(sys.argv[1:]).members)
res = train.train(cfgs)
print(json.dumps([[r.engine, [float(v).hex() for v in r.train_loss],
                   [float(v).hex() for v in r.val_loss or []], r.dead_units, repr(r.saturated_units)] for r in res]))
"""


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("model", [
    ["epochs=20", *TINY[1:]],
    # a convnet: its validation loss and unit shares come from compiled passes too
    ["model=cnn", "data=mnist1d", "data.n_train=200", "model.channels=[4,4]", "model.kernel=[5,3]",
     "model.stride=[2,2]", "model.padding=[1,1]", "model.pool=max", "epochs=2", "batch_size=100"],
], ids=["mlp", "cnn"])
def test_the_same_command_gives_the_same_bits_in_fresh_processes(tmp_path, model):
    env = {**os.environ, "ACTBENCH_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    args = ["engine=compiled", "activation=gelu,relu", "seed=0,1", *model]
    outs = []
    for _ in range(2):  # the first compiles into the empty cache, the second reads it
        done = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True,
                              timeout=900, check=True)
        outs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert all(run[0] == "compiled" for run in outs[0])
    assert outs[0] == outs[1]
    assert (tmp_path / "inductor").is_dir()


@pytest.mark.slow
@needs_compiler
def test_without_flags_a_step_saved_by_another_process_is_loaded(tmp_path):
    env = {**os.environ, "ACTBENCH_CACHE_DIR": str(tmp_path), "ACTBENCH_AUTO_STORE": "on", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    args = ["activation=gelu,relu", "seed=0,1", "epochs=20", *TINY[1:]]

    def child(*extra: str) -> list:
        done = subprocess.run([sys.executable, "-c", CHILD, *args, *extra], env=env, capture_output=True, text=True,
                              timeout=900, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = child()  # nothing saved: eager, and nothing compiled
    assert {run[0] for run in cold} == {"eager"} and not (tmp_path / "inductor").exists()
    asked = child("engine=compiled")
    warm = child()  # the command without flags loads what engine=compiled saved
    assert {run[0] for run in asked} == {"compiled"} and warm == asked


def test_each_activation_is_padded_to_one_of_a_few_sizes():
    assert [compiled.padded_size(n) for n in (1, 2, 3, 5, 13, 16, 17, 20, 25, 30, 33, 49, 65, 100, 129)] == \
        [2, 2, 3, 5, 13, 16, 18, 20, 26, 30, 36, 52, 72, 104, 144]
    assert all(n <= compiled.padded_size(n) <= max(2, n + n / 8) for n in range(1, 3000))
    assert len({compiled.padded_size(n) for n in range(65, 129)}) == 8  # shapes per doubling
    cfgs = compose_many(expand(["activation=gelu,relu", "seed=range(17)", *TINY]).members)
    cfgs = cfgs + cfgs[:1]  # gelu 18, relu 17
    out = compiled.pad(cfgs, lambda c: c.activation.name)
    assert out[:len(cfgs)] == cfgs
    assert [c.activation.name for c in out[len(cfgs):]] == ["relu"]  # gelu's 18 stays, relu's 17 becomes 18


@pytest.mark.slow
@needs_compiler
def test_a_search_trains_with_the_compiled_engine(runner, runs_dir, inductor_cache):
    args = ["search", "--runs-dir", str(runs_dir), "data=iris", "model.hidden_dim=4", "epochs=3", "--candidates", "6",
            "--seeds", "1", "--tune-seeds", "2", "--final-seeds", "2", "--judge", "2", "engine=compiled"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("engine ")]
    assert lines and all(ln.startswith("engine compiled for a stack of ") for ln in lines)
    engines = {json.loads(p.read_text())["engine"] for p in runs_dir.rglob("summary.json")}
    assert engines == {"compiled"}


@pytest.mark.parametrize("name", ["gelu", "mish", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_compiled_forms_match_the_modules_in_value_and_gradient(name, dtype):
    # inputs from far negative through tiny to past the clamps (|h| = 20), where exp would overflow
    h = torch.cat([torch.linspace(-60, 60, 2001, dtype=dtype), torch.tensor([1e-30, -1e-8, 3e-4], dtype=dtype)])
    module = create(name)
    fast = compiled_mlp.form(module)
    assert fast is not None and compiled_mlp.acts_of(_OneSlice(module))[0] is fast
    got_in, want_in = h.clone().requires_grad_(), h.clone().requires_grad_()
    got, want = fast(got_in), module(want_in)
    got.sum().backward(), want.sum().backward()
    # rounding-sized, on the scale of the input (both compute tails such as GELU's at h = -7 by
    # cancellation, so relative error there is no measure): measured at most 8 and 36 eps
    scale = torch.finfo(dtype).eps * (1.0 + h.abs())
    assert torch.isfinite(got).all() and torch.isfinite(got_in.grad).all()
    assert ((got - want).abs() <= 16 * scale).all()
    assert ((got_in.grad - want_in.grad).abs() <= 64 * scale).all()


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize(("kernel", "stride", "padding", "pool", "size"),
                         [(3, 1, 1, "max", 2), (5, 2, 1, "avg", 3), (3, 2, 0, "max", 3)])
def test_the_compiled_convnets_windows_and_pooling_are_the_eager_models(dims, kernel, stride, padding, pool, size):
    from activation_bench.engine.models import stacked_cnn as cnn
    from activation_bench.engine.models.conv_shapes import Block

    positions = (11,) * dims
    conv = tuple((n + 2 * padding - kernel) // stride + 1 for n in positions)
    block = Block(3, 4, kernel, stride, padding, positions, conv, tuple(n // size for n in conv))
    a = torch.randn(2, 5, *positions, 3, dtype=torch.float64, requires_grad=True)
    eager, fast = cnn._Im2col.apply(a, block), compiled_cnn.windows(a, block)
    assert torch.equal(eager, fast)
    g = torch.randn_like(eager)
    # the windows' gradient sums each input's overlapping windows in another order: to rounding
    assert torch.allclose(*(torch.autograd.grad(t, a, g)[0] for t in (eager, fast)), rtol=1e-13, atol=1e-15)
    # ties (a ReLU's zeros) included: max's gradient goes to the same value of each window
    out = torch.randn(2, 5 * math.prod(conv), 4, dtype=torch.float64).clamp(min=0).requires_grad_(True)
    model = type("Geometry", (), {"geometry": [block], "pool": pool, "pool_size": size, "dims": dims})()
    eager, fast = cnn.StackedCNN.layer_output(model, 0, None, out), compiled_cnn.pooled(out, block, pool, size)
    assert torch.equal(eager, fast)
    g = torch.randn_like(eager)
    assert torch.equal(*(torch.autograd.grad(t, out, g)[0] for t in (eager, fast)))


def test_modules_without_a_compiled_form_keep_their_own_forward():
    relu = create("relu")
    assert compiled_mlp.form(relu) is None and compiled_mlp.acts_of(_OneSlice(relu))[0] is relu
    assert compiled_mlp.form(torch.nn.GELU(approximate="tanh")) is None


class _OneSlice:
    """What acts_of reads of a stacked model: its slices' modules."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.slices = [type("Slice", (), {"module": module})()]
