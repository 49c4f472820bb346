"""activation=expr end to end: refusals at the command line, training against the built-ins,
stacks, learnable parameters, labels in the analysis, `actbench activations --fn`."""

from __future__ import annotations

import functools
import json
import math

import pytest
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose
from activation_bench.engine import plan, train
from activation_bench.engine.activations import expr_summary
from activation_bench.engine.activations.expr import parse
from tests.conftest import TINY, files_under
from tests.engine_helpers import stacked_and_alone


def _fn(text: str) -> str:
    """The override as a shell passes it after 'activation.fn="..."' quoting."""
    return f'activation.fn="{text}"'


# every refusal the feature promises, through `actbench run`: exit 2, one line, nothing written
CLI_REFUSALS = [
    ([_fn("__import__('os').system('touch pwned')")], "attribute access is not allowed"),
    ([_fn("x.__class__")], "attribute access is not allowed in activation.fn: 'x.__class__'"),
    ([_fn("open('/etc/passwd')")], "unknown function 'open'"),
    ([_fn("(lambda: x)()")], "lambdas are not allowed"),
    ([_fn("foo(x)")], "unknown function 'foo'"),
    ([_fn("x*sigmoid(beta*x)")], "parameter 'beta' of activation.fn 'x*sigmoid(beta*x)' has no value"),
    ([_fn("x +")], "syntax error in activation.fn 'x +'"),
    ([_fn("")], "activation.fn is empty"),
    ([], "activation.fn is empty"),
    ([_fn("x[0]")], "subscripts are not allowed"),
    ([_fn("[x for x in (1, 2)]")], "comprehensions are not allowed"),
    ([_fn("sigmoid(x, beta=2)")], "keyword arguments are not allowed"),
    ([_fn("x + 'a'")], "strings are not allowed"),
    ([_fn("x ** 99")], "exponent too large"),
    ([_fn("1/x")], "is not finite on the probe points (e.g. inf at x = 0)"),
    ([_fn("log(x)")], "is not finite on the probe points"),
    ([_fn("x - x")], "is constant on the probe points"),
    ([_fn("x*sigmoid(x)"), "+activation.beta=1.0"], "activation.beta is not a parameter of activation.fn"),
    ([_fn("x*sigmoid(beta*x)"), "activation.beta=1.0"], "are added with +activation.beta=1.0"),
    ([_fn("x*sigmoid(beta*x)"), "+activation.beta=abc"], "activation.beta must be a finite number"),
    ([_fn("x"), "activation.learnable=maybe"], "learnable"),
    ([_fn("x*sigmoid(x)"), "activation.name=gelu"], "activation.name 'gelu' is a registered activation"),
    ([_fn("x*sigmoid(x)"), "model.init=auto"], "model.init=auto needs a registered activation"),
]


@pytest.mark.parametrize(("overrides", "message"), CLI_REFUSALS)
def test_refusals_exit_2_and_write_nothing(runner, runs_dir, tmp_path, monkeypatch, overrides, message):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "activation=expr", *overrides, *TINY])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert message in err
    assert files_under(runs_dir) == [] and not (tmp_path / "pwned").exists()


def test_a_bad_member_stops_the_whole_sweep(runner, runs_dir):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", "activation=expr",
                                 'activation.fn="x*sigmoid(x)","1/x"', *TINY])
    assert result.exit_code == 2, result.output
    assert "sweep member [activation.fn=\"1/x\"]" in result.stderr or "1/x" in result.stderr
    assert files_under(runs_dir) == []


def test_unquoted_expression_gets_the_quoting_hint(runner, runs_dir):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "activation=expr", "activation.fn=max(x, 0)",
                                 *TINY])
    assert result.exit_code == 2
    assert """an expression is a quoted value: 'activation.fn="x*sigmoid(x)"'""" in result.stderr
    assert files_under(runs_dir) == []


def test_fn_belongs_to_expr(runner, runs_dir):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "activation=gelu", "+activation.fn=x",
                                 *TINY])
    assert result.exit_code == 2
    assert "activation.fn is for activation=expr" in result.stderr


# ---------------------------------------------------------------------------------------------
# training


EPOCHS = ["epochs=20"]  # default sizes otherwise (64 inputs, 64 hidden, 10 samples)


@functools.cache
def _losses(*overrides: str) -> tuple[float, ...]:
    """The training losses of one run (remembered: the built-ins are compared with several
    expressions, and a run is deterministic)."""
    return tuple(train.train([compose([*overrides, *EPOCHS])])[0].train_loss)


@pytest.mark.parametrize(("text", "builtin"), [
    ("relu(x)", "relu"), ("max(x, 0)", "relu"), ("silu(x)", "silu"), ("tanh(x)", "tanh"), ("softplus(x)", "softplus"),
])
def test_same_kernels_train_bitwise_like_the_builtin(text, builtin):
    assert _losses("activation=expr", _fn(text)) == _losses(f"activation={builtin}")


@pytest.mark.parametrize(("text", "builtin"), [
    ("x*sigmoid(x)", "silu"), ("x * (1 + erf(x / sqrt(2))) / 2", "gelu"), ("x*tanh(softplus(x))", "mish"),
    ("x / (1 + abs(x))", "softsign"),
])
def test_closed_forms_train_like_the_builtin_to_rtol_1e5(text, builtin):
    ours, theirs = _losses("activation=expr", _fn(text)), _losses(f"activation={builtin}")
    assert len(ours) == len(theirs) == 20
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert ours != _losses("activation=relu")  # the comparison can tell functions apart


def test_expressions_share_one_stack_and_members_equal_runs_alone():
    """Parameters of expressions that have none are refused, so the grid gives beta only to the
    expression that uses it: two sweeps, one with beta."""
    plain = ["activation=expr", 'activation.fn="x*sigmoid(x)","max(x, 0)","sin(x) + x"', "seed=0,1", "epochs=5"]
    with_beta = ["activation=expr", 'activation.fn="x*sigmoid(beta*x)","beta*x + sin(x)"', "+activation.beta=1.5",
                 "activation.learnable=false,true", "seed=0,1", "epochs=5", "model.depth=1,2"]
    for grid in (plain, with_beta):
        members = stacked_and_alone(grid)
        for labels, alone, stacked in members:
            assert alone.train_loss == stacked.train_loss, labels
            assert alone.status == "complete"
    from activation_bench.config.compose import compose_many
    from activation_bench.config.grid import expand

    cfgs = compose_many(expand(plain).members)
    assert len(plan.plan_stacks(cfgs)) == 1  # three expressions, one stack


def test_learnable_parameters_train_per_member_and_count():
    base = ["activation=expr", _fn("x*sigmoid(beta*x)"), "+activation.beta=1.0", "epochs=5", "lr=0.05"]
    fixed, learned = (train.train([compose([*base, f"activation.learnable={flag}"])])[0] for flag in ("false", "true"))
    assert learned.n_params == fixed.n_params + 1
    assert learned.train_loss != fixed.train_loss
    deep = [compose([*base, "activation.learnable=true", "model.depth=3", f"seed={s}"]) for s in (0, 1)]
    results = train.train(deep)
    assert [r.n_params for r in results] == [train.train([deep[0]])[0].n_params] * 2
    assert results[0].n_params - train.train([compose([*base, "model.depth=3"])])[0].n_params == 3  # one per layer


def test_learned_values_in_summary_and_run_table(runner, runs_dir):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "--name", "a", "activation=expr",
                                 _fn("x*sigmoid(beta*x) + c*x"), "+activation.beta=1.0", "+activation.c=0.5",
                                 "activation.learnable=true", "model.depth=2", "lr=0.05", *TINY])
    assert result.exit_code == 0, result.output
    learned = json.loads((runs_dir / "a" / "summary.json").read_text())["learned"]
    assert list(learned) == ["beta", "c"] and all(len(v) == 2 for v in learned.values())  # one per layer
    assert learned["beta"] != [1.0, 1.0] and learned["c"] != [0.5, 0.5]
    assert "learned" in result.stdout and "beta=" in result.stdout
    fixed = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "--name", "b", "-q", "activation=expr",
                                _fn("x*sigmoid(beta*x)"), "+activation.beta=1.0", *TINY])
    assert fixed.exit_code == 0 and "learned" not in json.loads((runs_dir / "b" / "summary.json").read_text())


def test_a_learned_parameter_moves_by_gradient():
    """The module's parameter gets autograd's gradient: with beta learnable, one SGD step changes it
    by -lr * dL/dbeta (checked against finite differences of the loss)."""
    import torch

    module = parse("x*sigmoid(beta*x)").module({"beta": 0.7}, learnable=True).double()
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    loss = (module(x) - torch.sin(x)).square().mean()
    loss.backward()

    def at(beta: float) -> float:
        return float((x * torch.sigmoid(beta * x) - torch.sin(x)).square().mean())

    numeric = (at(0.7 + 1e-6) - at(0.7 - 1e-6)) / 2e-6
    assert module.values[0].grad.item() == pytest.approx(numeric, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# labels and files


def test_sweep_labels_members_by_expression_and_compare_reads_them(runner, runs_dir):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "--name", "s", "-q", "activation=expr",
                                 'activation.fn="x*sigmoid(x)","max(x, 0)"', "seed=0,1", *TINY])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load((runs_dir / "s" / "sweep.yaml").read_text())
    assert doc["keys"] == ["activation", "seed"]
    assert [m["labels"]["activation"] for m in doc["members"]] == ["x*sigmoid(x)"] * 2 + ["max(x, 0)"] * 2
    header = (runs_dir / "s" / "results.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "activation"
    out = runner.invoke(app, ["compare", str(runs_dir / "s"), "--format", "json"])
    assert out.exit_code == 0, out.output
    groups = {row["activation"] for row in json.loads(out.stdout)["rows"]}
    assert groups == {"x*sigmoid(x)", "max(x, 0)"}


def test_single_runs_are_labelled_by_text_or_name(runner, runs_dir):
    for extra in ([_fn("x*sigmoid(x)")], [_fn("x*tanh(softplus(x))"), "activation.name=my_mish"]):
        assert runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "activation=expr", *extra, *TINY]
                             ).exit_code == 0
    dirs = sorted(p.name for p in runs_dir.iterdir())
    assert any("my_mish" in d for d in dirs) and any("x_sigmoid_x" in d for d in dirs)
    out = runner.invoke(app, ["compare", *map(str, sorted(runs_dir.iterdir())), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert {row["activation"] for row in json.loads(out.stdout)["rows"]} == {"x*sigmoid(x)", "my_mish"}


def test_saved_expression_config_reruns_bitwise(runner, runs_dir):
    first = ["activation=expr", _fn("x*sigmoid(beta*x)"), "+activation.beta=1.5", "activation.learnable=true",
             "activation.name=swish_b", *TINY]
    assert runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", "a", *first]).exit_code == 0
    again = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", "b",
                                "--config", str(runs_dir / "a" / "config.yaml")])
    assert again.exit_code == 0, again.output
    assert (runs_dir / "a" / "losses.csv").read_bytes() == (runs_dir / "b" / "losses.csv").read_bytes()


def test_plot_activations_draws_expressions(runner, tmp_path):
    out = tmp_path / "acts.png"
    result = runner.invoke(app, ["plot-activations", "silu", "x*sigmoid(beta*x):beta=2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0
    bad = runner.invoke(app, ["plot-activations", "x.__class__", "-o", str(tmp_path / "b.png")])
    assert bad.exit_code == 2 and "attribute access" in bad.stderr and not (tmp_path / "b.png").exists()


def test_report_draws_the_expressions_of_a_sweep(runner, runs_dir):
    assert runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "--name", "s", "-q", "activation=expr",
                               'activation.fn="x*sigmoid(x)","x/(1+abs(x))"', "seed=0,1", *TINY]).exit_code == 0
    from activation_bench.analysis.loading import load
    from activation_bench.render.report import shapes

    drawn = shapes(load([runs_dir / "s"]), ["activation"])
    assert drawn["names"] == ["x*sigmoid(x)", "x/(1+abs(x))"] and drawn["svg"]


# ---------------------------------------------------------------------------------------------
# actbench activations --fn


def test_activations_fn_prints_the_probe_summary(runner):
    result = runner.invoke(app, ["activations", "--fn", "x*sigmoid(beta*x):beta=1", "--format", "csv"])
    assert result.exit_code == 0, result.output
    facts = dict(line.split(",", 1) for line in result.stdout.splitlines()[1:])
    assert facts["equals"] == "silu" and facts["monotonic"] == "no" and facts["bounded"] == "below"
    assert facts["smooth"] == "yes" and facts["f(0)"] == "0" and facts["f'(0)"] == "0.5"
    table = runner.invoke(app, ["activations", "--fn", "max(x, 0)"])
    assert table.exit_code == 0 and "relu" in table.stdout and "kink near x = 0" in table.stdout
    bad = runner.invoke(app, ["activations", "--fn", "__import__('os')"])
    assert bad.exit_code == 2 and "unknown function '__import__'" in bad.stderr


@pytest.mark.parametrize(("text", "monotonic", "bounded", "smooth", "equals"), [
    ("tanh(x)", "increasing", "both", True, ["tanh"]),
    ("x / (1 + abs(x))", "increasing", "both", True, ["softsign"]),
    ("-x", "decreasing", "no", True, []),
    ("sin(x)", "no", "both", True, []),
    ("abs(x)", "no", "below", False, []),
    ("log1p(exp(x))", "increasing", "below", True, ["softplus"]),
    ("max(x, 0.31)", "increasing", "below", False, []),
    ("x*sigmoid(1.702*x)", "no", "below", True, ["gelu_sigmoid"]),
    ("0.5*x*(1+tanh(0.7978845608028654*(x+0.044715*x**3)))", "no", "below", True, ["gelu_tanh"]),
])
def test_summary_facts(text, monotonic, bounded, smooth, equals):
    facts = expr_summary.summarize(parse(text), {})
    assert (facts["monotonic"], facts["bounded"], facts["smooth"], facts["equals"]) == (monotonic, bounded, smooth,
                                                                                          equals)
    if not smooth:
        assert facts["kink"] == pytest.approx(0.31 if "0.31" in text else 0.0, abs=1e-3)
    assert math.isfinite(facts["value_at_0"]) and math.isfinite(facts["slope_at_0"])
