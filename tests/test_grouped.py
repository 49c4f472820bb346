"""engine/activations/grouped.py: many members' expressions evaluated grouped by operation equal each member's
expression evaluated alone, values and gradients, and the number of operation calls does not grow
with the number of members."""

from __future__ import annotations

import torch

from activation_bench.engine.activations.grouped import GroupedExpr, Node

OPS = {
    "add": torch.add, "mul": torch.mul, "sub": torch.sub, "neg": torch.neg, "sin": torch.sin,
    "sigmoid": torch.sigmoid, "exp": torch.exp, "max": lambda a, b: torch.clamp_min(a, b)
    if isinstance(b, float) else torch.maximum(a, b), "pow": torch.pow,
}

X_SIN = [Node("sin", (0,)), Node("add", (0, 1))]  # x + sin(x)
SILU = [Node("sigmoid", (0,)), Node("mul", (0, 1))]  # x * sigmoid(x)
GELU_S = [Node("mul", (0, 1.702)), Node("sigmoid", (1,)), Node("mul", (0, 2))]  # x * sigmoid(1.702 x)
RELU = [Node("max", (0, 0.0))]
IDENT: list[Node] = []
SQ_EXP = [Node("pow", (0, 2.0)), Node("neg", (1,)), Node("exp", (2,)), Node("sub", (0, 3))]  # x - exp(-x**2)
PROGRAMS = [X_SIN, SILU, GELU_S, RELU, IDENT, SQ_EXP, SILU, X_SIN]


def _alone(prog, h):
    vals = [h]
    for node in prog:
        vals.append(OPS[node.op](*(vals[a] if isinstance(a, int) else a for a in node.args)))
    return vals[-1]


def test_grouped_equals_each_member_alone_values_and_gradients():
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(len(PROGRAMS), 16, 32, generator=gen)
    g = torch.randn(h.shape, generator=gen)
    hg = h.clone().requires_grad_()
    out = GroupedExpr(PROGRAMS, OPS)(hg)
    out.backward(g)
    for i, prog in enumerate(PROGRAMS):
        hi = h[i].clone().requires_grad_()
        alone = _alone(prog, hi)
        alone.backward(g[i])
        assert torch.equal(out[i].detach(), alone.detach()), i
        assert torch.equal(hg.grad[i], hi.grad), i


def test_operation_calls_do_not_grow_with_members():
    small = GroupedExpr(PROGRAMS, OPS)
    large = GroupedExpr(PROGRAMS * 50, OPS)
    assert large.kernel_groups == small.kernel_groups
    h = torch.randn(len(PROGRAMS) * 50, 4, 8)
    torch.testing.assert_close(large(h)[: len(PROGRAMS)], small(h[: len(PROGRAMS)]), rtol=0, atol=0)


def test_members_reordered_give_the_same_rows():
    h = torch.randn(len(PROGRAMS), 4, 8)
    perm = torch.randperm(len(PROGRAMS), generator=torch.Generator().manual_seed(1))
    out = GroupedExpr(PROGRAMS, OPS)(h)
    shuffled = GroupedExpr([PROGRAMS[i] for i in perm], OPS)(h[perm])
    assert torch.equal(shuffled, out[perm])


def test_expression_members_in_a_stack_equal_the_same_runs_alone():
    from tests.conftest import TINY
    from tests.engine_helpers import stacked_and_alone

    fns = '"x*sigmoid(x)","x + sin(x)","exp(-x**2) - x","max(x, 0)","x"'
    out = stacked_and_alone(["activation=expr", f"activation.fn={fns}", "seed=0,1", *TINY])
    assert len(out) == 10
    for labels, alone, stacked in out:
        assert alone.train_loss == stacked.train_loss, labels


def test_a_stack_of_expressions_has_one_activation_slice():
    from activation_bench.config.compose import compose_many
    from activation_bench.engine import train
    from tests.conftest import TINY

    fns = ["x*sigmoid(x)", "x + sin(x)", "sin(x) + x", "tanh(x) * x", "x"] * 4
    cfgs = compose_many([["activation=expr", f'activation.fn="{fn}"', f"seed={i}", *TINY] for i, fn in enumerate(fns)]
                        + [["activation=relu", "seed=0", *TINY]])
    stack = train._build(cfgs)
    kinds = [type(s.module).__name__ for s in stack.model.slices]
    assert kinds == ["GroupedExpr", "ReLU"]
    assert (stack.model.slices[0].start, stack.model.slices[0].stop) == (0, len(fns))
