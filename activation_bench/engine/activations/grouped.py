"""Many expression activations evaluated at once, grouped by operator.

A stack may hold thousands of members, each with its own expression. Calling each member's
expression on its own rows would cost one Python call per member per operation. Here every
member's expression is lowered to a small program (`Node`s in topological order), the nodes are
sorted by depth and then by operation, and each depth is evaluated with one gather per argument
position and one call per distinct operation over a contiguous range of nodes. A step therefore
takes a number of kernels set by the operations present (a few dozen for the core search space),
not by the number of members.

Each node applies the same operation to the same operands as the member's expression does alone
(constants stay Python numbers, in the same argument position), so a member's values do not depend
on which other members share its stack. The gradient comes from autograd through the gathers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from activation_bench.engine.activations.expr import Expr
    from activation_bench.engine.activations.expr import Node as ExprNode


@dataclass(frozen=True)
class Node:
    """ops[op](*args): an int argument is the index of an earlier node of the program (0 is the
    input x, nodes are numbered from 1), a float is a constant."""

    op: str
    args: tuple[int | float, ...]


Program = Sequence[Node]  # a member's expression; its last node is the output (empty: x itself)


@dataclass
class _Group:
    op: str
    rows: tuple[int, int]  # the buffer rows [start, stop) its outputs go to
    args: tuple[tuple[int, int] | float, ...]  # per argument: rows of that position's gather, or a constant
    distinct: tuple[bool, ...] = ()  # per argument: no buffer row is read twice by this group


@dataclass
class _Depth:
    groups: list[_Group]
    gathers: list[int]  # argument positions gathered (index buffers gather_{depth}_{position})


def _is_ref(a: object) -> bool:
    return isinstance(a, int) and not isinstance(a, bool)


def _shared(prog: Program) -> tuple[list[Node], int]:
    """The program with repeated nodes computed once (`abs(x) * abs(x)`: one abs), so that a group
    reads a buffer row at most once per argument position; and the index of its output node."""
    out: list[Node] = []
    new_index = [0]  # old node index -> new one (0: x)
    seen: dict[Node, int] = {}
    for node in prog:
        mapped = Node(node.op, tuple(new_index[a] if _is_ref(a) else a for a in node.args))
        if mapped not in seen:
            out.append(mapped)
            seen[mapped] = len(out)
        new_index.append(seen[mapped])
    return out, new_index[-1]


def _key(node: Node) -> tuple:
    return (node.op, tuple((True, 0.0) if _is_ref(a) else (False, float(a)) for a in node.args))


class GroupedExpr(nn.Module):
    """forward(h [M, ...]) -> [M, ...]: member m's program applied to h[m].

    Values live in one buffer of rows (rows 0..M-1 are the members' inputs, then each depth's
    nodes, sorted by operation). In training, each group's operation is recorded by autograd on
    its own inputs only, and the backward pass walks the groups in reverse, adding each input's
    gradient into one buffer of row gradients: no zero-filled buffer per gather.
    """

    def __init__(self, programs: Sequence[Program], ops: Mapping[str, Callable[..., torch.Tensor]]) -> None:
        super().__init__()
        self.ops = dict(ops)
        shared = [_shared(p) for p in programs]
        programs = [p for p, _ in shared]
        m = len(programs)
        rows: list[list[int]] = [[i] for i in range(m)]  # rows[i][k]: the buffer row of member i's node k
        depth_of: list[list[int]] = [[0] for _ in range(m)]
        by_depth: dict[int, list[tuple[tuple, int, int]]] = {}  # depth -> (key, member, node)
        for i, prog in enumerate(programs):
            for k, node in enumerate(prog, 1):
                if node.op not in self.ops:
                    raise ValueError(f"unknown operation '{node.op}'")
                refs = [a for a in node.args if _is_ref(a)]
                if not refs:
                    raise ValueError("a node of constants only (fold constants before grouping)")
                if any(not 0 <= r < k for r in refs):
                    raise ValueError(f"node {k} refers to a later node")
                depth_of[i].append(1 + max(depth_of[i][r] for r in refs))
                by_depth.setdefault(depth_of[i][-1], []).append((_key(node), i, k))
                rows[i].append(-1)
        self.depths: list[_Depth] = []
        offset = m
        for d in sorted(by_depth):
            items = sorted(by_depth[d], key=lambda t: t[0])  # stable: members, then nodes, in order
            runs: list[list[tuple[int, int]]] = []  # runs of equal keys: (member, node)
            for pos, (key, i, k) in enumerate(items):
                rows[i][k] = offset + pos
                if pos and items[pos - 1][0] == key:
                    runs[-1].append((i, k))
                else:
                    runs.append([(i, k)])
            self.depths.append(self._depth(len(self.depths), offset, runs, programs, rows))
            offset += len(items)
        self.n_rows = offset
        out_rows = [r[k] for r, (_, k) in zip(rows, shared)]
        self.register_buffer("out_rows", torch.tensor(out_rows, dtype=torch.long), persistent=False)
        self.kernel_groups = sum(len(d.groups) for d in self.depths)  # operation calls per forward

    def _depth(self, n: int, offset: int, runs: list[list[tuple[int, int]]], programs: Sequence[Program],
               rows: list[list[int]]) -> _Depth:
        """One depth's groups, and per argument position the rows its gather reads."""
        index: dict[int, list[int]] = {}
        groups = []
        start = offset
        for run in runs:
            node = programs[run[0][0]][run[0][1] - 1]
            args: list[tuple[int, int] | float] = []
            distinct: list[bool] = []
            for j, a in enumerate(node.args):
                if not _is_ref(a):
                    args.append(float(a))
                    distinct.append(True)
                    continue
                src = index.setdefault(j, [])
                args.append((len(src), len(src) + len(run)))
                read = [rows[i][programs[i][k - 1].args[j]] for i, k in run]
                src.extend(read)
                distinct.append(len(set(read)) == len(read))
            groups.append(_Group(node.op, (start, start + len(run)), tuple(args), tuple(distinct)))
            start += len(run)
        for j, src in index.items():
            self.register_buffer(f"gather_{n}_{j}", torch.tensor(src, dtype=torch.long), persistent=False)
        return _Depth(groups, sorted(index))

    def gather_index(self, n: int, j: int) -> torch.Tensor:
        return getattr(self, f"gather_{n}_{j}")

    def evaluate(self, h: torch.Tensor, record: list | None = None) -> torch.Tensor:
        """The buffer of every node's values [rows, ...]. With `record`, each group's autograd
        graph (output, inputs, group, depth) is appended to it."""
        buf = h.new_empty((self.n_rows, *h.shape[1:]))
        buf[: h.shape[0]].copy_(h)
        for n, depth in enumerate(self.depths):
            gathered = {j: _rows(buf, self.gather_index(n, j)) for j in depth.gathers}
            for g in depth.groups:
                args = [a if isinstance(a, float) else gathered[j][a[0] : a[1]] for j, a in enumerate(g.args)]
                if record is None:
                    out = self.ops[g.op](*args)
                else:
                    args = [a if isinstance(a, float) else a.requires_grad_() for a in args]
                    with torch.enable_grad():
                        out = self.ops[g.op](*args)
                    record.append((out, args, g, n))
                buf[g.rows[0] : g.rows[1]].copy_(out)
        return buf

    def backward_rows(self, grad_out: torch.Tensor, record: list, like: torch.Tensor) -> torch.Tensor:
        """The gradient with respect to the input h, from the output's gradient and `record`."""
        grad = torch.zeros((self.n_rows, *like.shape[1:]), dtype=like.dtype, device=like.device)
        grad.view(self.n_rows, -1).index_copy_(0, self.out_rows, grad_out.reshape(len(self.out_rows), -1))
        for out, args, g, n in reversed(record):
            leaves = [(j, a) for j, a in enumerate(args) if isinstance(a, torch.Tensor)]
            grads = torch.autograd.grad(out, [a for _, a in leaves], grad[g.rows[0] : g.rows[1]])
            for (j, _), gj in zip(leaves, grads):
                lo, hi = g.args[j]  # type: ignore[misc]
                rows = self.gather_index(n, j)[lo:hi]
                flat = grad.view(grad.shape[0], -1)
                if g.distinct[j]:  # select, add, copy back: plain copies, faster than a scatter-add
                    flat.index_copy_(0, rows, _rows(grad, rows).add_(gj).view(len(rows), -1))
                else:
                    if gj.untyped_storage().data_ptr() == grad.untyped_storage().data_ptr():
                        gj = gj.clone()  # the gradient passed through (x + c): rows of the buffer itself
                    flat.index_add_(0, rows, gj.reshape(len(rows), -1))
        return grad[: like.shape[0]]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if not (torch.is_grad_enabled() and h.requires_grad):
            return _rows(self.evaluate(h), self.out_rows)
        return _Grouped.apply(h, self)


def functional(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The module's forward as a plain function of its input, for torch.func transforms (the
    compiled engine's vjp): a grouped expression module evaluated without its autograd.Function."""
    if isinstance(module, GroupedExpr):
        return lambda h: _rows(module.evaluate(h), module.out_rows)
    return module


def _rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t[index] along the first axis, through a 2-D view (torch's CPU index_select copies whole
    rows there, several times faster than on the 3-D tensor)."""
    return t.view(t.shape[0], -1).index_select(0, index).view(len(index), *t.shape[1:])


class _Grouped(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: torch.Tensor, module: GroupedExpr) -> torch.Tensor:  # type: ignore[override]
        record: list = []
        out = _rows(module.evaluate(h, record), module.out_rows)
        ctx.module, ctx.record, ctx.like = module, record, h
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        grad = ctx.module.backward_rows(grad_out.contiguous(), ctx.record, ctx.like)
        ctx.record = None
        return grad, None


# ---------------------------------------------------------------------------------------------
# expression activations (engine/activations/expr.py) as programs


def expr_ops() -> dict[str, Callable[..., torch.Tensor]]:
    """The operations of expression trees, as engine/activations/expr_torch.py evaluates them."""
    import functools
    import operator

    from activation_bench.engine.activations import expr_torch

    binary = {k: functools.partial(expr_torch._binary, k) for k in ("add", "sub", "mul", "div", "pow", "max", "min")}
    return {"neg": operator.neg, **expr_torch.UNARY_OPS, **binary}


def lower(expr: Expr, params: Mapping[str, float]) -> list[Node]:
    """The program of an expression with these (fixed) parameter values. Subtrees without x are
    numbers, computed as engine/activations/expr_torch.py computes them (float64), so every operation gets the
    operands the expression alone would give it. A constant expression is a ValueError (the probe
    refuses those before training)."""
    from activation_bench.engine.activations import expr_torch

    nodes: list[Node] = []

    def walk(n: ExprNode) -> int | float:
        if n.op == "x":
            return 0
        if not expr_torch._varies(n, frozenset()):
            return float(expr_torch.compile_tree(n)(None, params))  # type: ignore[arg-type]
        args = tuple(walk(a) for a in n.args)
        nodes.append(Node(n.name if n.op == "call" else n.op, args))
        return len(nodes)

    if isinstance(walk(expr.tree), float):
        raise ValueError(f"constant expression '{expr.text}'")
    return nodes


def is_groupable(cfg: Mapping) -> bool:
    """An expression activation (a node with `fn`) whose parameters are fixed: members with these
    share one GroupedExpr. Learnable ones have parameters of their own per member."""
    if "fn" not in cfg or cfg.get("_target_"):
        return False
    if not cfg.get("learnable", False):
        return True
    from activation_bench.engine.activations import expr

    return not expr.parse(cfg["fn"]).params


def from_configs(cfgs: Sequence[Mapping]) -> GroupedExpr:
    """One module for members with expression activations (activation configs with fn and their
    parameters' values; not learnable)."""
    from activation_bench.engine.activations import expr

    programs = []
    cache: dict[tuple, list[Node]] = {}
    for cfg in cfgs:
        parsed = expr.parse(cfg["fn"])
        params = parsed.bind(cfg)
        key = (parsed.canonical, tuple(sorted(params.items())))
        if key not in cache:
            cache[key] = lower(parsed, params)
        programs.append(cache[key])
    return GroupedExpr(programs, expr_ops())
