"""The stacked optimiser's training features (engine/optim.py): AdamW's decoupled weight decay, beta2,
SGD momentum and Nesterov, per-member gradient clipping and the learning-rate schedule, each against
torch.optim / torch.nn.utils per member, bit for bit; their config keys, validation, hashes, stacking
and the compiled engine's fallback."""

from __future__ import annotations

import math

import pytest
import torch

from activation_bench.config.compose import compose
from activation_bench.config.hashing import config_hash
from activation_bench.engine.optim import Schedule, StackedOptimizer, default_decay
from activation_bench.errors import UsageError
from tests.engine_helpers import stacked_and_alone

M = 3
# weights [M, in, out], biases, a norm weight; each member's part a multiple of 16 elements: the fused Adam
# kernel's vector loop then covers every member alike (an unaligned tail is done in scalar arithmetic,
# which can round a member's update 1 ulp away from the same member alone: see the tolerance test)
SHAPES = [(M, 4, 8), (M, 16), (M, 1, 16), (M, 16, 2), (M, 32)]
UNALIGNED = [(M, 5, 7), (M, 7), (M, 1, 7), (M, 7, 2), (M, 2)]


def get_lr(it: int, learning_rate: float, warmup_iters: int, lr_decay_iters: int, min_lr: float) -> float:
    """nanoGPT's train.py get_lr, verbatim."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def _stack(seed: int = 0, shapes: list[tuple[int, ...]] = SHAPES) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).requires_grad_() for s in shapes]


def _grads(step: int, scale: list[float] | None = None, shapes: list[tuple[int, ...]] = SHAPES) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    out = [torch.randn(s, generator=g) for s in shapes]
    if scale is not None:
        out = [t * torch.tensor(scale).view(-1, *([1] * (t.dim() - 1))) for t in out]
    return out


def _set_grads(params: list[torch.Tensor], grads: list[torch.Tensor], m: int | None = None) -> None:
    """The stack's gradients (m None), or member m's slice of them for its parameters alone."""
    for p, g in zip(params, grads):
        p.grad = (g if m is None else g[m]).clone()


def _alone(params: list[torch.Tensor], m: int) -> list[torch.Tensor]:
    return [p.detach()[m].clone().requires_grad_() for p in params]


def _run_both(make_torch, steps: int = 6, schedule: Schedule | None = None, clip: float = 0.0,
              shapes: list[tuple[int, ...]] = SHAPES, **kw):
    """The stacked optimiser and, per member, a torch one (make_torch(member's params)) over the same
    gradients: returns (stacked params, [per member params])."""
    params = _stack(shapes=shapes)
    members = [_alone(params, m) for m in range(M)]
    opt = StackedOptimizer(params, schedule=schedule, grad_clip=clip, **kw)
    refs = [make_torch(p) for p in members]
    for t in range(steps):
        grads = _grads(t, [1.0, 50.0, 0.01], shapes)
        _set_grads(params, grads)
        opt.step()
        for m, (ref, ps) in enumerate(zip(refs, members)):
            _set_grads(ps, grads, m)
            if schedule is not None:
                for group in ref.param_groups:
                    group["lr"] = schedule(t)
            if clip:
                torch.nn.utils.clip_grad_norm_(ps, clip)
            ref.step()
    return params, members


def _assert_bitwise(params: list[torch.Tensor], members: list[list[torch.Tensor]]) -> None:
    for m, ps in enumerate(members):
        for p, q in zip(params, ps):
            assert torch.equal(p.detach()[m], q.detach()), (m, p.shape)


def test_schedule_is_nanogpts_get_lr() -> None:
    for warmup, decay, lr, min_lr in ((100, 2000, 1e-3, 1e-4), (0, 50, 0.1, 0.0), (5, 5, 1.0, 0.5), (10, 3, 1e-2, 0.0)):
        sched = Schedule("cosine", lr, warmup, decay, min_lr)
        for it in range(decay + warmup + 20):
            if warmup == decay == it:  # nanoGPT divides 0 by 0 here: min_lr
                assert sched(it) == min_lr
                continue
            assert sched(it) == get_lr(it, lr, warmup, decay, min_lr), (warmup, decay, it)
    assert sched(0) == 1e-2 / 11 and Schedule("constant", 0.3, 10, 5, 0.1)(3) == 0.3


def test_adam_default_equals_torch_fused_adam() -> None:
    params, members = _run_both(lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True), kind="adam", lr=0.01)
    _assert_bitwise(params, members)


def test_adamw_equals_torch_fused_adamw_with_nanogpt_groups_and_schedule() -> None:
    """nanoGPT's configure_optimizers: matrices decay, biases and norm weights do not (here: dim >= 3 with the
    member axis); beta2 0.99; the cosine schedule set in the param groups before each step."""
    sched = Schedule("cosine", 0.01, 2, 5, 1e-3)
    flags = default_decay([torch.zeros(s) for s in SHAPES])
    assert flags == [True, False, True, True, False]

    def adamw(ps):
        return torch.optim.AdamW([{"params": [p for p, f in zip(ps, flags) if f], "weight_decay": 0.1},
                                  {"params": [p for p, f in zip(ps, flags) if not f], "weight_decay": 0.0}],
                                 lr=0.01, betas=(0.9, 0.99), fused=True)

    params, members = _run_both(adamw, steps=8, schedule=sched, kind="adam", lr=0.01, betas=(0.9, 0.99),
                                weight_decay=0.1)
    _assert_bitwise(params, members)
    # and the decay did something: plain Adam ends elsewhere
    plain, _ = _run_both(lambda ps: torch.optim.Adam(ps, lr=0.01), steps=8, schedule=sched, kind="adam", lr=0.01,
                         betas=(0.9, 0.99))
    assert not torch.equal(plain[0], params[0]) and torch.equal(plain[1], params[1])


def test_unaligned_members_within_an_ulp_of_torch_fused_adamw() -> None:
    """Where a member's part is not a multiple of the vector width, the fused kernel does some of a
    member's elements in its scalar tail in one case and its vector loop in the other: 1 ulp apart."""
    sched = Schedule("cosine", 0.01, 2, 5, 1e-3)

    def adamw(ps):
        return torch.optim.AdamW([{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
                                  {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}],
                                 lr=0.01, betas=(0.9, 0.99), fused=True)

    params, members = _run_both(adamw, steps=8, schedule=sched, shapes=UNALIGNED, clip=1.0, kind="adam", lr=0.01,
                                betas=(0.9, 0.99), weight_decay=0.1)
    for m, ps in enumerate(members):
        for p, q in zip(params, ps):
            torch.testing.assert_close(p.detach()[m], q.detach(), rtol=1e-6, atol=1e-7)


def test_adamw_foreach_fallback_within_tolerance_of_torch(monkeypatch) -> None:
    def adamw(ps):
        return torch.optim.AdamW([{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
                                  {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}],
                                 lr=0.01, betas=(0.9, 0.99), foreach=True)

    params = _stack()
    members = [_alone(params, m) for m in range(M)]
    opt = StackedOptimizer(params, "adam", 0.01, (0.9, 0.99), weight_decay=0.1)
    opt.fused = False
    refs = [adamw(p) for p in members]
    for t in range(5):
        grads = _grads(t)
        _set_grads(params, grads)
        opt.step()
        for m, (ref, ps) in enumerate(zip(refs, members)):
            _set_grads(ps, grads, m)
            ref.step()
    for m, ps in enumerate(members):
        for p, q in zip(params, ps):
            torch.testing.assert_close(p.detach()[m], q.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_equals_torch_sgd(nesterov: bool) -> None:
    params, members = _run_both(lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=nesterov),
                                schedule=Schedule("cosine", 0.05, 2, 4, 0.001), kind="sgd", lr=0.05, momentum=0.9,
                                nesterov=nesterov)
    _assert_bitwise(params, members)


def test_plain_sgd_equals_torch_sgd() -> None:
    params, members = _run_both(lambda ps: torch.optim.SGD(ps, lr=0.05), kind="sgd", lr=0.05)
    _assert_bitwise(params, members)


def test_each_member_is_clipped_as_clip_grad_norm_clips_it_alone() -> None:
    """Member 1's gradients are 50x, member 2's 0.01x: 1 is clipped, 2 is not, each exactly as torch."""
    for kind, make in (("adam", lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True)),
                       ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.5))):
        params, members = _run_both(make, clip=1.0, kind=kind, lr=0.01, momentum=0.5 if kind == "sgd" else 0.0)
        _assert_bitwise(params, members)


def test_clipping_never_mixes_members() -> None:
    """One member's huge gradient changes no other member's clipped gradient, in any stack size."""
    params = _stack()
    opt = StackedOptimizer(params, "sgd", 0.1, grad_clip=1.0)
    base = _grads(0)
    huge = [g.clone() for g in base]
    for g in huge:
        g[1] *= 1e12
    a, b = opt.clipped(base), opt.clipped(huge)
    for x, y in zip(a, b):
        assert torch.equal(x[0], y[0]) and torch.equal(x[2], y[2]) and not torch.equal(x[1], y[1])
    bigger = StackedOptimizer([torch.zeros(5, *s[1:]) for s in SHAPES], "sgd", 0.1, grad_clip=1.0)
    wide = bigger.clipped([torch.cat([g, g[:2]]) for g in base])  # the same members in a stack of 5
    for x, y in zip(a, wide):
        assert torch.equal(x, y[:M])
    for g in base:  # .grad is left as the loss gave it
        assert g.abs().max() > 0


def test_a_members_own_parameter_counts_toward_its_norm_only() -> None:
    """A per-member activation's parameters (no member axis, one module per member and layer) join their
    owner's norm, in parameter order, exactly as clip_grad_norm_ over that member's parameters alone."""
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        w, b = torch.randn(M, 40, 30, generator=g), torch.randn(M, 30, generator=g)
        own = [torch.randn(1, generator=g) * 100 for _ in range(2 * M)]  # each member's PReLU weight per layer
        grads = [w, *own[:M], b, *own[M:]]
        owners = {**{1 + m: m for m in range(M)}, **{2 + M + m: m for m in range(M)}}
        opt = StackedOptimizer([torch.zeros_like(t) for t in grads], "sgd", 0.1, grad_clip=1.0, owners=owners)
        out = opt.clipped(grads)
        for m in range(M):
            ps = [torch.zeros_like(t, requires_grad=True) for t in (w[m], own[m], b[m], own[M + m])]
            for p, t in zip(ps, (w[m], own[m], b[m], own[M + m])):
                p.grad = t.clone()
            torch.nn.utils.clip_grad_norm_(ps, 1.0)
            for mine, ref in zip((out[0][m], out[1 + m], out[1 + M][m], out[2 + M + m]), ps):
                assert torch.equal(mine, ref.grad), (seed, m)


def test_config_keys_defaults_and_hash() -> None:
    cfg = compose([])
    assert (cfg.weight_decay, cfg.beta2, cfg.momentum, cfg.nesterov, cfg.grad_clip, cfg.schedule, cfg.warmup_steps,
            cfg.decay_steps, cfg.min_lr) == (0.0, 0.999, 0.0, False, 0.0, "constant", 0, None, 0.0)
    assert config_hash(cfg) == "d7378612aec1fba2"  # computed before these keys existed
    assert config_hash(compose(["weight_decay=0", "beta2=0.999", "grad_clip=0", "schedule=constant"])) == \
        "d7378612aec1fba2"
    seen = {config_hash(cfg)}
    for override in (["weight_decay=0.1"], ["beta2=0.99"], ["optimizer=sgd", "momentum=0.9"],
                     ["optimizer=sgd", "momentum=0.9", "nesterov=true"], ["grad_clip=1"], ["schedule=cosine"],
                     ["schedule=cosine", "warmup_steps=100", "min_lr=1e-4"], ["schedule=cosine", "decay_steps=50"]):
        h = config_hash(compose(override))
        assert h not in seen, override
        seen.add(h)


@pytest.mark.parametrize("args, message", [
    (["weight_decay=-0.1"], "weight_decay must be >= 0"),
    (["optimizer=sgd", "weight_decay=0.1"], "weight_decay applies to optimizer=adam"),
    (["beta2=1"], r"beta2 must be in \(0, 1\)"),
    (["beta2=0"], r"beta2 must be in \(0, 1\)"),
    (["optimizer=sgd", "beta2=0.99"], "beta2 applies to optimizer=adam"),
    (["optimizer=sgd", "momentum=1"], r"momentum must be in \[0, 1\)"),
    (["momentum=0.9"], "momentum applies to optimizer=sgd"),
    (["optimizer=sgd", "nesterov=true"], "nesterov=true needs optimizer=sgd and momentum > 0"),
    (["grad_clip=-1"], "grad_clip must be >= 0"),
    (["schedule=linear"], "unknown schedule 'linear'; valid: constant, cosine"),
    (["schedule=cosine", "warmup_steps=-1"], "warmup_steps must be >= 0"),
    (["schedule=cosine", "decay_steps=0"], "decay_steps must be >= 1"),
    (["schedule=cosine", "min_lr=0.1"], r"min_lr must be in \[0, lr=0.001\]"),
    (["warmup_steps=10"], "warmup_steps, decay_steps and min_lr apply to schedule=cosine"),
])
def test_bad_optimizer_settings_are_refused(runner, runs_dir, args, message) -> None:
    from tests.conftest import assert_refused_by_run_and_sweep

    with pytest.raises(UsageError, match=message):
        compose(args)
    if args == ["weight_decay=-0.1"]:  # one through the CLI: exit 2, one line
        assert_refused_by_run_and_sweep(runner, runs_dir, args, message)


def test_compiled_engine_falls_back_to_eager_for_these_settings() -> None:
    from activation_bench.engine.compiled import choose

    for args in (["weight_decay=0.1"], ["grad_clip=1"], ["schedule=cosine"], ["optimizer=sgd", "momentum=0.9"]):
        engine, why = choose.plan(compose(["engine=compiled", *args]), 4, 100, 10)
        assert engine == "eager", args
        assert why.startswith("compiled engine not used: its step has plain Adam and SGD only, not ")
        assert args[-1].split("=")[0] in why
    assert choose.plan(compose(["engine=compiled", "beta2=0.99"]), 4, 100, 10)[1] == \
        "compiled engine not used: its step has plain Adam and SGD only, not beta2=0.99; falling back to eager"
    assert choose.optimizer_settings(compose(["engine=compiled"])) == ""


@pytest.mark.parametrize("extra", [
    ["optimizer=sgd", "lr=0.05", "momentum=0.9", "nesterov=true", "grad_clip=0.5", "schedule=cosine",
     "warmup_steps=3", "min_lr=0.001"],
    ["weight_decay=0.1", "beta2=0.99", "grad_clip=0.1", "schedule=cosine", "warmup_steps=2", "decay_steps=10",
     "lr=0.01"],
])
def test_members_train_alone_as_in_their_stack(extra) -> None:
    """Stacked == alone, bit for bit, with the new settings (a PReLU's own parameter clipped with its member)."""
    grid = ["activation=gelu,prelu,relu", "seed=0,1", "data.n_samples=12", "data.input_dim=3", "model.hidden_dim=5",
            "batch_size=4", "epochs=4", *extra]
    for labels, alone, stacked in stacked_and_alone(grid):
        assert alone.train_loss == stacked.train_loss, labels
        assert alone.status == "complete"
    # and the settings did something: without them the losses differ
    plain = stacked_and_alone(grid[:7])[0][1].train_loss
    assert plain != stacked_and_alone(grid)[0][1].train_loss


def test_settings_split_stacks() -> None:
    from activation_bench.engine.plan import stack_key

    base = stack_key(compose([]))
    for args in (["weight_decay=0.1"], ["grad_clip=1"], ["schedule=cosine"], ["beta2=0.99"]):
        assert stack_key(compose(args)) != base
