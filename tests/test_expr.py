"""Expression activations: the parser's allowlist, canonical text, the torch evaluator and the probe."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from activation_bench.engine.activations import expr as E
from activation_bench.errors import UsageError

# every refusal the feature promises, with the part the one-line message must name
REFUSED = [
    ('__import__("os").system("ls")', "attribute access is not allowed", '__import__("os").system'),
    ('__import__("os")', "unknown function '__import__'", '__import__("os")'),
    ("x.__class__", "attribute access is not allowed", "x.__class__"),
    ('open("/etc/passwd")', "unknown function 'open'", 'open("/etc/passwd")'),
    ("(lambda: x)()", "lambdas are not allowed", "lambda: x"),
    ("foo(x)", "unknown function 'foo'", "foo(x)"),
    ("x +", "syntax error", "x +"),
    ("sin(x", "syntax error", "sin(x"),
    ("", "activation.fn is empty", ""),
    ("   ", "activation.fn is empty", ""),
    ("x[0]", "subscripts are not allowed", "x[0]"),
    ("[x for x in (1, 2)]", "comprehensions are not allowed", "[x for x in (1, 2)]"),
    ("sum(x for x in y)", "unknown function 'sum'", "sum"),
    ("sin(sum(a for a in b))", "unknown function 'sum'", "sum"),
    ("max(*x)", "starred arguments are not allowed", "*x"),
    ("sin(*x)", "starred arguments are not allowed", "*x"),
    ('"abc"', "strings are not allowed", '"abc"'),
    ("x + 'a'", "strings are not allowed", "'a'"),
    ('f"{x}"', "strings are not allowed", 'f"{x}"'),
    ("sigmoid(x, beta=2)", "keyword arguments are not allowed", "beta=2"),
    ("x % 2", "operator '%' is not allowed", "x % 2"),
    ("x // 2", "operator '//' is not allowed", "x // 2"),
    ("~x", "operator '~' is not allowed", "~x"),
    ("x if x else 1", "conditional expressions are not allowed", "x if x else 1"),
    ("x < 1", "comparisons are not allowed", "x < 1"),
    ("(y := x)", "assignments are not allowed", "y := x"),
    ("x, x", "tuples are not allowed", "x, x"),
    ("True * x", "is not a number", "True"),
    ("1j * x", "is not a number", "1j"),
    ("1e999 * x", "not finite", "1e999"),
    ("x ** 100", "exponent too large", "x ** 100"),
    ("x ** -17", "exponent too large", "x ** -17"),
    ("sin", "is a function", "sin"),
    ("min(x)", "min takes 2 arguments", "min(x)"),
    ("sin(x, x)", "sin takes 1 argument", "sin(x, x)"),
    ("_beta * x", "not allowed", "_beta"),
    ("name * x", "is reserved", "name"),
    ("x\n+ 1", "one line", ""),
    ("x" + " + x" * 100, "characters long", ""),
    ("sin(" * 17 + "x" + ")" * 17, "nests more than", ""),
]


@pytest.mark.parametrize(("text", "message", "part"), REFUSED)
def test_refusals_are_one_line_naming_the_part(text, message, part):
    with pytest.raises(UsageError) as info:
        E.parse(text)
    msg = str(info.value)
    assert message in msg
    assert part in msg
    assert "\n" not in msg


def test_parsing_never_evaluates(tmp_path):
    """A refused expression has no effect: the file the payload would create is not created."""
    target = tmp_path / "pwned"
    with pytest.raises(UsageError):
        E.parse(f'__import__("os").system("touch {target}")')
    assert not target.exists()


def test_parsing_needs_no_torch():
    code = ("import sys; from activation_bench.engine.activations import expr; "
            "e = expr.parse('x*sigmoid(beta*x)'); assert e.params == ('beta',); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("text", "canonical"), [
    ("x*sigmoid(1.702*x)", "x * sigmoid(1.702 * x)"),
    ("-x**2", "-x ** 2"),
    ("(-x)**2", "(-x) ** 2"),
    ("x-(x-1)", "x - (x - 1)"),
    ("(x-x)-1", "x - x - 1"),
    ("x**-1", "x ** -1"),
    ("2**x**2", "2 ** x ** 2"),
    ("(2**x)**2", "(2 ** x) ** 2"),
    ("max( x,0 )", "max(x, 0)"),
    ("1e-3*x + +x", "0.001 * x + x"),
    ("-(x+1)*2", "-(x + 1) * 2"),
    ("x/(1+abs(x))", "x / (1 + abs(x))"),
    ("x/(x*x)", "x / (x * x)"),
    ("2.0*x", "2 * x"),
])
def test_canonical_text_round_trips(text, canonical):
    e = E.parse(text)
    assert e.canonical == canonical
    assert E.parse(e.canonical).tree == e.tree


def test_parameters_in_order_and_bound():
    e = E.parse("a * x + sigmoid(beta * x) * a")
    assert e.params == ("a", "beta")
    assert e.bind({"a": 1, "beta": 2.5, "name": "expr"}) == {"a": 1.0, "beta": 2.5}
    with pytest.raises(UsageError, match=r"parameter 'beta' .* has no value; give it, e.g. \+activation.beta=1.0"):
        e.bind({"a": 1.0})
    with pytest.raises(UsageError, match="activation.a must be a finite number"):
        e.bind({"a": "one", "beta": 1.0})
    with pytest.raises(UsageError, match="activation.a must be a finite number"):
        e.bind({"a": math.inf, "beta": 1.0})


def test_structurally_equal_trees_are_equal_and_hashable():
    assert E.parse("x*sigmoid(x)").tree == E.parse("x * sigmoid((x))").tree
    assert len({E.parse("x+1").tree, E.parse("(x)+1.0").tree, E.parse("1+x").tree}) == 2


# ---------------------------------------------------------------------------------------------
# torch


X = torch.linspace(-6, 6, 241, dtype=torch.float64)
SAME_AS = [  # expression, the torch function it must equal exactly (same kernels)
    ("relu(x)", torch.relu),
    ("max(x, 0)", torch.relu),
    ("silu(x)", nn.functional.silu),
    ("gelu(x)", nn.functional.gelu),
    ("tanh(x)", torch.tanh),
    ("softplus(x)", nn.functional.softplus),
    ("x * sigmoid(1.702 * x)", lambda t: t * torch.sigmoid(1.702 * t)),
    ("min(x, 0)", lambda t: t.clamp(max=0)),
    ("abs(x) + 2 ** 3", lambda t: t.abs() + 8.0),
]


@pytest.mark.parametrize(("text", "fn"), SAME_AS)
def test_values_equal_torch_exactly(text, fn):
    for dtype in (torch.float32, torch.float64):
        x = X.to(dtype)
        assert torch.equal(E.parse(text).evaluate(x), fn(x))


@pytest.mark.parametrize(("text", "closed"), [
    ("sinc(x)", lambda t: torch.where(t == 0, 1.0, torch.sin(t) / t)),
    ("x * (1 + erf(x / sqrt(2))) / 2", lambda t: t * torch.special.ndtr(t)),
    ("log1p(exp(x))", nn.functional.softplus),
    ("sinh(x) / cosh(x)", torch.tanh),
    ("asinh(x) + atan(x) - log(cosh(x) + 1)", lambda t: torch.asinh(t) + torch.atan(t) - torch.log(torch.cosh(t) + 1)),
    ("x * sigmoid(x)", nn.functional.silu),
])
def test_closed_forms(text, closed):
    torch.testing.assert_close(E.parse(text).evaluate(X), closed(X), rtol=1e-12, atol=1e-12)


def test_gradient_by_autograd_matches_the_closed_form():
    x = X.clone().requires_grad_()
    E.parse("x * sigmoid(x)").evaluate(x).sum().backward()
    s = torch.sigmoid(X)
    torch.testing.assert_close(x.grad, s * (1 + X * (1 - s)), rtol=1e-12, atol=1e-12)


def test_parameters_fixed_and_learnable():
    e = E.parse("x * sigmoid(beta * x) + c")
    fixed = e.module({"beta": 1.5, "c": 0.25})
    assert list(fixed.parameters()) == []
    torch.testing.assert_close(fixed(X), X * torch.sigmoid(1.5 * X) + 0.25)
    learn = e.module({"beta": 1.5, "c": 0.25}, learnable=True).double()
    assert [p.shape for p in learn.parameters()] == [torch.Size([]), torch.Size([])]
    torch.testing.assert_close(learn(X), fixed(X))
    learn(X).sum().backward()
    beta_grad = (X * X * torch.sigmoid(1.5 * X) * (1 - torch.sigmoid(1.5 * X))).sum()
    torch.testing.assert_close(learn.values[0].grad, beta_grad)
    torch.testing.assert_close(learn.values[1].grad, torch.tensor(float(len(X)), dtype=torch.float64))
    assert "x * sigmoid(beta * x) + c" in repr(fixed)


def test_constant_subtrees_in_float64_without_python_errors():
    # 0 ** -1 and (-8) ** 0.5 would raise or turn complex in Python arithmetic; here IEEE's inf, nan
    assert torch.isinf(E.parse("x + 0 ** -1").evaluate(X)).all()
    assert torch.isnan(E.parse("x + (-8) ** 0.5").evaluate(X)).all()
    assert torch.equal(E.parse("x * (2 ** 0.5)").evaluate(X), X * math.sqrt(2))


def test_probe_points_are_fixed_and_hold_the_grid():
    p = E.probe_points()
    assert p.dtype == torch.float32 and p.numel() == E.PROBE_SAMPLES + 201
    assert torch.equal(p, E.probe_points())
    assert p[: E.PROBE_SAMPLES].abs().max() <= 5 and (p == 0).any()
    assert p.min() == -10 and p.max() == 10


@pytest.mark.parametrize(("text", "problem"), [
    ("1 / x", "is not finite on the probe points (e.g. inf at x = 0)"),
    ("log(x)", "is not finite"),
    ("sqrt(x)", "is not finite"),
    ("exp(x ** 3)", "is not finite"),
    ("x / (x - 0.5)", "is not finite"),
    ("x - x", "is constant on the probe points"),
    ("sin(x) ** 2 + cos(x) ** 2", "is constant"),
    ("beta + 1", "is constant"),
    ("relu(x - 20)", "is constant"),
])
def test_probe_refuses(text, problem):
    result = E.probe(E.parse(text), {"beta": 2.0})
    assert result.problem is not None and problem in result.problem
    with pytest.raises(UsageError, match="probe points"):
        result.check()


@pytest.mark.parametrize("text", ["x * sigmoid(x)", "max(x, 0)", "x / (1 + abs(x))", "sinc(x)", "log(1 + x ** 2)",
                                  "relu(x - 4)"])
def test_probe_accepts(text):
    result = E.probe(E.parse(text))
    assert result.finite and not result.constant and result.problem is None
    assert result.outputs.shape == result.points.shape
    result.check()
