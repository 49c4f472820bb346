"""Candidate spaces for `actbench search`: the core unit b(u1(x), u2(x)) of Ramachandran, Zoph and
Le 2017 ("Searching for Activation Functions", arXiv 1710.05941), or a user's YAML file listing
unary and binary functions of the expression grammar.

A candidate is the text of one expression: the binary template with x1 and x2 replaced by the two
unary templates. Candidates are enumerated in a fixed order (binary, then u1, then u2, each in the
order listed) and `draw` samples from that order with a seed, so the same space, count and seed
always give the same candidates.

The paper trains the constant beta; this space has no trainable parameters, so beta is fixed: 1 in
beta*x, x + beta, exp(-beta (x1 - x2)^2) and exp(-beta |x1 - x2|), so beta*x is x (listed once),
and 1/2 in the mix beta x1 + (1 - beta) x2 (at 1 it would be x1 alone). epsilon is 1e-7.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass
from pathlib import Path

from activation_bench.errors import UsageError

EPS = "1e-7"

# the paper's unary set (beta fixed at 1, so beta*x is x and the constant beta is 1)
CORE_UNARY: tuple[str, ...] = (
    "x", "-x", "abs(x)", "x**2", "x**3", "sqrt(x)", "x + 1", f"log(abs(x) + {EPS})", "exp(x)",
    "sin(x)", "cos(x)", "sinh(x)", "cosh(x)", "tanh(x)", "asinh(x)", "atan(x)", "sinc(x)",
    "max(x, 0)", "min(x, 0)", "sigmoid(x)", "softplus(x)", "exp(-x**2)", "erf(x)", "1",
)
# the paper's binary set
CORE_BINARY: tuple[str, ...] = (
    "x1 + x2", "x1 * x2", "x1 - x2", f"x1 / (x2 + {EPS})", "max(x1, x2)", "min(x1, x2)",
    "sigmoid(x1) * x2", "exp(-(x1 - x2)**2)", "exp(-abs(x1 - x2))", "0.5*x1 + 0.5*x2",
)

_ATOM = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|[0-9.]+(e-?[0-9]+)?")
MAX_TEMPLATE = 200  # characters in one unary or binary template of a FILE space


@dataclass(frozen=True)
class Space:
    name: str  # "core" or the file's path
    unary: tuple[str, ...]
    binary: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.binary) * len(self.unary) ** 2

    def candidate(self, index: int) -> str:
        """The expression of candidate `index` in enumeration order."""
        nu = len(self.unary)
        b, rest = divmod(index, nu * nu)
        u1, u2 = divmod(rest, nu)
        return compose(self.binary[b], self.unary[u1], self.unary[u2])

    def candidates(self) -> list[str]:
        return [compose(b, u1, u2) for b, u1, u2 in itertools.product(self.binary, self.unary, self.unary)]


def _wrap(text: str) -> str:
    """The template as an operand: bare names, numbers and whole calls as they are, else in parentheses."""
    text = text.strip()
    if _ATOM.fullmatch(text) or _is_call(text):
        return text
    return f"({text})"


def _is_call(text: str) -> bool:
    m = re.match(r"[A-Za-z_][A-Za-z_0-9]*\(", text)
    if not m or not text.endswith(")"):
        return False
    depth = 0
    for i, ch in enumerate(text[m.end() - 1:], m.end() - 1):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i == len(text) - 1
    return False


def compose(binary: str, u1: str, u2: str) -> str:
    """b(u1(x), u2(x)) as text: x1 and x2 of the binary template replaced by the unary templates,
    printed back in the expression grammar's canonical form (one spacing, minimal parentheses)
    where it parses; as substituted where it does not (the probe then rejects it, with the reason)."""
    from activation_bench.engine.activations import expr

    repl = {"x1": _wrap(u1), "x2": _wrap(u2)}
    text = re.sub(r"\b(x1|x2)\b", lambda m: repl[m.group(1)], binary)
    try:
        return expr.parse(text).canonical
    except UsageError:
        return text


def draw(space: Space, n: int | None, seed: int) -> list[int]:
    """Candidate indices: all of them in order (n None or >= the space), else n drawn without
    replacement with `seed`, in the order drawn."""
    if n is not None and n < 1:
        raise UsageError(f"--candidates must be at least 1, got {n}")
    if n is None or n >= space.size:
        return list(range(space.size))
    return random.Random(seed).sample(range(space.size), n)


def core() -> Space:
    return Space("core", CORE_UNARY, CORE_BINARY)


def load(spec: str) -> Space:
    """`core`, or a YAML file {unary: [...], binary: [...]}; each template is checked with the
    expression grammar (unary ones in x, binary ones in x1 and x2, no parameters)."""
    if spec == "core":
        return core()
    import yaml

    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"--space: no such file '{spec}' (or use 'core')")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"--space {spec}: not a readable YAML file: {first}") from None
    if not isinstance(doc, dict) or set(doc) - {"unary", "binary"} or not doc.get("unary") or not doc.get("binary"):
        raise UsageError(f"--space {spec}: expected a mapping with non-empty lists 'unary' and 'binary'")
    unary = _templates(doc["unary"], "unary", {"x"}, spec)
    binary = _templates(doc["binary"], "binary", {"x1", "x2"}, spec)
    return Space(str(path), unary, binary)


def template_names(text: str, where: str) -> set[str]:
    """The names an expression template uses: its parameters, and x where it uses the input."""
    from activation_bench.engine.activations import expr

    try:
        parsed = expr.parse(text)
    except UsageError as exc:
        raise UsageError(f"{where} '{text}': {exc}") from None

    def uses_x(node: expr.Node) -> bool:
        return node.op == "x" or any(uses_x(a) for a in node.args)

    return set(parsed.params) | ({"x"} if uses_x(parsed.tree) else set())


def _templates(items: object, kind: str, names: set[str], spec: str) -> tuple[str, ...]:
    if not isinstance(items, list):
        raise UsageError(f"--space {spec}: '{kind}' must be a list of expressions")
    out: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise UsageError(f"--space {spec}: {kind} entry {item!r} is not an expression")
        text = str(item).strip()
        if len(text) > MAX_TEMPLATE:
            raise UsageError(f"--space {spec}: {kind} entry '{text[:40]}...' is longer than {MAX_TEMPLATE} characters")
        used = template_names(text, f"--space {spec}: {kind} entry")
        extra = used - names
        if extra:
            raise UsageError(f"--space {spec}: {kind} entry '{text}' uses {', '.join(sorted(extra))}; "
                             f"{kind} functions may use only {' and '.join(sorted(names))} (no parameters)")
        if text not in out:
            out.append(text)
    return tuple(out)
