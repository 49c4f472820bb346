"""Activations written as expressions of x: parsed with `ast`, never evaluated.

`activation=expr 'activation.fn="x*sigmoid(beta*x)"' +activation.beta=1.0` trains the function
the text describes. The text is parsed by `ast.parse(text, mode="eval")` and every node is checked
against an allowlist; the torch function is built from the checked tree by this module (user text
never reaches eval or exec). Parsing needs no torch: torch is imported inside the functions that
evaluate.

Grammar: numbers (finite), `x`, `+ - * / **`, unary minus (and plus), parentheses, and calls of
FUNCTIONS: abs exp log log1p sqrt sin cos tanh sinh cosh asinh atan erf sigmoid softplus relu gelu
silu sinc (one argument) and min max (two). `sinc(x)` is the unnormalised sin(x)/x (1 at 0;
torch's sinc is sin(pi x)/(pi x)); softplus is torch's (beta 1, threshold 20); gelu the exact one. Any other name is a
parameter (an ASCII identifier, not starting with `_`, not one of RESERVED); its value comes from the
config (`+activation.beta=1.0`). Limits: MAX_LENGTH characters, MAX_DEPTH levels of nesting,
constant exponents of at most MAX_EXPONENT in magnitude. Every refusal is a UsageError of one line
naming the offending part.

API (stable; the activation search builds on it):

    parse(text) -> Expr                     raises UsageError
    Expr.text                               the text as given (stripped)
    Expr.canonical                          the tree printed back: one spacing, minimal parentheses
                                            (parse(e.canonical).tree == e.tree)
    Expr.tree                               the root Node (frozen, hashable; see Node)
    Expr.params                             parameter names, in order of first appearance
    Expr.bind(values) -> dict[str, float]   the parameters' values from a mapping (e.g. the
                                            activation config node); a missing one is a UsageError
    Expr.evaluate(x, params) -> Tensor      torch, elementwise over x; params: name -> float or
                                            0-d tensor (a learnable parameter); autograd-friendly
    Expr.module(params, learnable) -> nn.Module   an ExprActivation (parameters as nn.Parameter
                                            when learnable)
    probe_points(dtype) -> Tensor           the fixed probe points (PROBE_SAMPLES N(0, 1) samples,
                                            seed 0, clipped to +-5, then the grid -10, -9.9, ..., 10)
    probe(expr, params, dtype) -> ProbeResult
        .points, .outputs (Tensors), .finite, .constant (bools), .problem (None or one line),
        .check() raises UsageError with .problem

An activation config node {name: expr, fn: TEXT, learnable: BOOL, <parameter>: VALUE, ...}:
    from_node(node) -> (Expr, values, learnable)    UsageError on a bad node (not the probe)
    probe_problem(expr, values, dtype_name) the probe's refusal or None (memoised)

Node kinds (Node.op): "x"; "num" (value); "param" (name); "neg" (args[0]); "add", "sub", "mul",
"div", "pow" (args[0], args[1]); "call" (name, args).
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from activation_bench.errors import UsageError

if TYPE_CHECKING:
    import torch

MAX_LENGTH = 300
MAX_DEPTH = 16
MAX_EXPONENT = 16.0
PROBE_SAMPLES = 512
UNARY = ("abs", "exp", "log", "log1p", "sqrt", "sin", "cos", "tanh", "sinh", "cosh", "asinh", "atan",
         "erf", "sigmoid", "softplus", "relu", "gelu", "silu", "sinc")
BINARY = ("min", "max")
FUNCTIONS: dict[str, int] = {**{f: 1 for f in UNARY}, **{f: 2 for f in BINARY}}  # name -> arity
RESERVED = ("x", "name", "fn", "learnable")  # keys of the activation node that are not parameters
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**"}
_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2, "neg": 3, "pow": 4}
_REFUSED = {  # node type -> what the refusal calls it
    ast.Attribute: "attribute access", ast.Subscript: "subscripts", ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions", ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions", ast.JoinedStr: "strings", ast.Compare: "comparisons",
    ast.BoolOp: "boolean operators", ast.IfExp: "conditional expressions", ast.NamedExpr: "assignments",
    ast.Tuple: "tuples", ast.List: "lists", ast.Dict: "dicts", ast.Set: "sets", ast.Starred: "starred arguments",
    ast.Await: "await", ast.Slice: "slices",
}


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple[Node, ...] = ()
    value: float | None = None  # op "num"
    name: str | None = None  # op "param": the parameter; op "call": the function

    @property
    def depth(self) -> int:
        return 1 + max((a.depth for a in self.args), default=0)


@dataclass(frozen=True)
class Expr:
    text: str
    tree: Node
    params: tuple[str, ...]
    canonical: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "canonical", to_text(self.tree))

    def bind(self, values: Mapping[str, Any]) -> dict[str, float]:
        """Each parameter's value from `values` (a number); one line naming the first missing or bad one."""
        bound = {}
        for p in self.params:
            if p not in values:
                raise UsageError(f"parameter '{p}' of activation.fn '{self.text}' has no value; "
                                 f"give it, e.g. +activation.{p}=1.0")
            v = values[p]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise UsageError(f"activation.{p} must be a finite number, got {v!r}")
            bound[p] = float(v)
        return bound

    def evaluate(self, x: torch.Tensor, params: Mapping[str, Any] | None = None) -> torch.Tensor:
        """The function at every element of x (params: name -> float or 0-d tensor)."""
        from activation_bench.engine.activations import expr_torch

        return expr_torch.evaluate(self.tree, x, params or {})

    def module(self, params: Mapping[str, float] | None = None, learnable: bool = False) -> Any:
        """A torch module computing this expression (an ExprActivation)."""
        from activation_bench.engine.activations import expr_torch

        return expr_torch.ExprActivation(self, dict(params or {}), learnable)


# ---------------------------------------------------------------------------------------------
# parsing


def parse(text: str) -> Expr:
    """Parse and check an activation expression; UsageError (one line) on anything not allowed."""
    if not isinstance(text, str):
        raise UsageError(f"activation.fn must be a string (quote it: 'activation.fn=\"x*sigmoid(x)\"'), got {text!r}")
    text = text.strip()
    if not text or text == "???":
        raise UsageError("activation.fn is empty; activation=expr needs an expression of x, "
                         "e.g. 'activation.fn=\"x*sigmoid(x)\"'")
    if len(text) > MAX_LENGTH:
        raise UsageError(f"activation.fn is {len(text)} characters long; at most {MAX_LENGTH}")
    if "\n" in text or "\r" in text:
        raise UsageError("activation.fn must be one line")
    try:
        root = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        col = f" at column {exc.offset}" if exc.offset else ""
        raise UsageError(f"syntax error in activation.fn '{text}'{col}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise UsageError(f"activation.fn '{text}' does not parse: {type(exc).__name__}") from None
    params: dict[str, None] = {}
    tree = _Checker(text, params).node(root.body, 1)
    return Expr(text, tree, tuple(params))


class _Checker:
    """Turns an ast tree into Nodes, refusing every node type not on the allowlist."""

    def __init__(self, text: str, params: dict[str, None]) -> None:
        self.text, self.params = text, params

    def part(self, node: ast.AST) -> str:
        seg = ast.get_source_segment(self.text, node)
        return seg if seg is not None else type(node).__name__

    def refuse(self, what: str, node: ast.AST) -> UsageError:
        return UsageError(f"{what} not allowed in activation.fn: '{self.part(node)}' (in '{self.text}')")

    def node(self, node: ast.AST, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise UsageError(f"activation.fn '{self.text}' nests more than {MAX_DEPTH} levels deep")
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                return Node("neg", (self.node(node.operand, depth + 1),))
            if isinstance(node.op, ast.UAdd):
                return self.node(node.operand, depth)
            raise self.refuse(f"operator '{_op_text(node.op)}' is", node)
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.refuse(f"operator '{_op_text(node.op)}' is", node)
            left, right = self.node(node.left, depth + 1), self.node(node.right, depth + 1)
            if op == "pow" and right.op in ("num", "neg") and _number(right) is not None:
                if abs(_number(right)) > MAX_EXPONENT:
                    raise UsageError(f"exponent too large in activation.fn: '{self.part(node)}' "
                                     f"(at most {MAX_EXPONENT:g} in magnitude)")
            return Node(op, (left, right))
        if isinstance(node, ast.Call):
            return self.call(node, depth)
        what = _REFUSED.get(type(node), f"'{type(node).__name__}' expressions")
        raise self.refuse(f"{what} {'is' if what.endswith('access') else 'are'}", node)

    def constant(self, node: ast.Constant) -> Node:
        v = node.value
        if isinstance(v, (str, bytes)):
            raise self.refuse("strings are", node)
        if isinstance(v, bool) or v is None or v is Ellipsis or isinstance(v, complex):
            raise UsageError(f"'{self.part(node)}' is not a number; activation.fn allows numbers, x, "
                             f"parameters and calls (in '{self.text}')")
        value = float(v) if isinstance(v, float) or abs(v) < 10 ** 300 else math.inf
        if not math.isfinite(value):
            raise UsageError(f"number '{self.part(node)}' in activation.fn is not finite")
        return Node("num", value=value)

    def name(self, node: ast.Name) -> Node:
        n = node.id
        if n == "x":
            return Node("x")
        if n in FUNCTIONS:
            raise UsageError(f"'{n}' is a function in activation.fn; call it, e.g. {n}(x)")
        if not _IDENT.match(n):
            raise UsageError(f"name '{n}' not allowed in activation.fn: parameters are ASCII letters, digits "
                             "and _, starting with a letter")
        if n in RESERVED:
            raise UsageError(f"name '{n}' is reserved (activation.{n} is a setting); call the parameter otherwise")
        self.params.setdefault(n, None)
        return Node("param", name=n)

    def call(self, node: ast.Call, depth: int) -> Node:
        func = node.func
        if not isinstance(func, ast.Name):
            return self.node(func, depth + 1)  # refuses: attribute access, subscripts, lambdas, ...
        if func.id not in FUNCTIONS:
            raise UsageError(f"unknown function '{func.id}' in activation.fn: '{self.part(node)}'; "
                             f"valid: {', '.join(FUNCTIONS)}")
        if node.keywords:
            raise self.refuse("keyword arguments are", node.keywords[0])
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.refuse("starred arguments are", a)
        arity = FUNCTIONS[func.id]
        if len(node.args) != arity:
            raise UsageError(f"{func.id} takes {arity} argument{'s' if arity > 1 else ''}, got "
                             f"{len(node.args)}: '{self.part(node)}'")
        return Node("call", tuple(self.node(a, depth + 1) for a in node.args), name=func.id)


def _op_text(op: ast.AST) -> str:
    return {ast.Mod: "%", ast.FloorDiv: "//", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|",
            ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>", ast.Not: "not", ast.Invert: "~"}.get(
        type(op), type(op).__name__)


def _number(node: Node) -> float | None:
    """The value of a number or a negated number, else None."""
    if node.op == "num":
        return node.value
    if node.op == "neg" and node.args[0].op == "num":
        return -node.args[0].value
    return None


# ---------------------------------------------------------------------------------------------
# printing


def to_text(node: Node) -> str:
    """The canonical text of a tree: `a op b` with single spaces, parentheses only where needed."""
    op = node.op
    if op == "x":
        return "x"
    if op == "param":
        return node.name
    if op == "num":
        v = node.value
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    if op == "call":
        return f"{node.name}({', '.join(to_text(a) for a in node.args)})"
    if op == "neg":
        inner = node.args[0]
        return "-" + _wrap(inner, _prec(inner) < _PREC["neg"])
    left, right = node.args
    p = _PREC[op]
    if op == "pow":  # right-associative; a unary minus may follow **
        return f"{_wrap(left, _prec(left) <= p)} ** {_wrap(right, _prec(right) < _PREC['neg'])}"
    return f"{_wrap(left, _prec(left) < p)} {_SYMBOL[op]} {_wrap(right, _prec(right) <= p)}"


def _prec(node: Node) -> int:
    return _PREC.get(node.op, 5)


def _wrap(node: Node, paren: bool) -> str:
    text = to_text(node)
    return f"({text})" if paren else text


# ---------------------------------------------------------------------------------------------
# the probe


@dataclass(frozen=True)
class ProbeResult:
    expr: Expr
    points: torch.Tensor
    outputs: torch.Tensor
    finite: bool
    constant: bool
    problem: str | None  # one line: why the function is refused, or None

    def check(self) -> None:
        if self.problem:
            raise UsageError(self.problem)


def probe_points(dtype: Any = None) -> torch.Tensor:
    """PROBE_SAMPLES N(0, 1) samples (torch generator seed 0, float64) clipped to +-5, then the grid
    -10, -9.9, ..., 10 (which holds 0 exactly), converted to dtype (default float32)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    samples = torch.randn(PROBE_SAMPLES, generator=gen, dtype=torch.float64).clamp(-5.0, 5.0)
    grid = torch.arange(-100, 101, dtype=torch.float64) / 10.0
    return torch.cat([samples, grid]).to(dtype or torch.float32)


def probe(expr: Expr, params: Mapping[str, float] | None = None, dtype: Any = None) -> ProbeResult:
    """The function on the probe points (in dtype, default float32): refused (problem set) where it
    is not finite, or constant (outputs within 1e-6 of each other, relative to their size)."""
    import torch

    points = probe_points(dtype)
    with torch.no_grad():
        out = expr.evaluate(points, dict(params or {}))
    finite = bool(torch.isfinite(out).all())
    problem = None
    constant = False
    if not finite:
        bad = points[~torch.isfinite(out)]
        at = bad[bad.abs().argmin()].item()
        problem = (f"activation.fn '{expr.text}' is not finite on the probe points (e.g. {out[points == at][0].item()} "
                   f"at x = {at:g}); guard divisions and logarithms, e.g. x / (1 + abs(x))")
    else:
        spread = (out.max() - out.min()).item()
        constant = spread <= 1e-6 * max(1.0, out.abs().max().item())
        if constant:
            problem = f"activation.fn '{expr.text}' is constant on the probe points (about {out[0].item():g})"
    return ProbeResult(expr, points, out, finite, constant, problem)


# ---------------------------------------------------------------------------------------------
# the activation config node


NODE_KEYS = ("name", "fn", "learnable", "_target_")  # the node's keys that are not parameter values


def from_node(node: Mapping[str, Any]) -> tuple[Expr, dict[str, float], bool]:
    """The expression, its parameters' values and `learnable` of an activation config node; one
    line naming the problem (an unused key, a missing value, ...). The probe is separate."""
    learnable = node.get("learnable", False)
    if not isinstance(learnable, bool):
        raise UsageError(f"activation.learnable must be true or false, got {learnable!r}")
    e = parse(node.get("fn"))
    values = {k: v for k, v in node.items() if k not in NODE_KEYS}
    extra = [k for k in values if k not in e.params]
    if extra:
        raise UsageError(f"activation.{extra[0]} is not a parameter of activation.fn '{e.text}' "
                         f"(its parameters: {', '.join(e.params) or 'none'})")
    return e, e.bind(values), learnable


def probe_problem(expr: Expr, values: Mapping[str, float], dtype: str = "float32") -> str | None:
    """The probe's refusal (one line) or None, in the run's dtype ("float32" or "float64")."""
    return _probe_problem(expr.text, tuple(values.items()), dtype)


@functools.lru_cache(maxsize=4096)
def _probe_problem(text: str, values: tuple[tuple[str, float], ...], dtype: str) -> str | None:
    import torch

    return probe(parse(text), dict(values), getattr(torch, dtype)).problem
