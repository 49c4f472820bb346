"""The stacked GPT (engine/models/stacked_gpt.py): agreement with nanoGPT's model written in plain
PyTorch, a member in a stack == the member alone bit for bit, nanoGPT's init, parameter counts
and weight-decay groups."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from activation_bench.cfg import Cfg
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models import gpt_alone, stacked_gpt
from activation_bench.engine.models import slices as slices_mod
from activation_bench.engine.models.losses import member_token_cross_entropy

B, T, V = 3, 8, 11


def cfg(seed: int, act: str = "gelu", **model) -> Cfg:
    m = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, dropout=0.0, bias=False, norm="layer")
    m.update(model)
    return Cfg.wrap({"seed": seed, "activation": {"name": act}, "model": m})


def make(cfgs: list[Cfg], dtype: torch.dtype = torch.float32) -> stacked_gpt.StackedGPT:
    """The stack of these members, the FFN 4 n_embd wide (h1 = 2 h2 for a gated activation)."""
    first = cfgs[0]
    h1, h2 = activations.hidden_width(dict(first.activation), 4 * first.model.n_embd)
    keys = [json.dumps(dict(c.activation), sort_keys=True) for c in cfgs]
    sl = slices_mod.slices_for(cfgs, keys, first.model.n_layer, "cpu", dtype)
    return stacked_gpt.build(cfgs, sl, V, h1, h2, "cpu", dtype)


def batch(cfgs: list[Cfg], t: int = T) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and targets [M, B, T], each member's drawn from its seed (the same in any stack)."""
    idx, tgt = [], []
    for c in cfgs:
        g = torch.Generator().manual_seed(c.seed)
        idx.append(torch.randint(V, (B, t), generator=g))
        tgt.append(torch.randint(V, (B, t), generator=g))
    return torch.stack(idx), torch.stack(tgt)


# --------------------------------------------------------------------------------------------
# nanoGPT's model.py, one member, in plain PyTorch


class RefLayerNorm(nn.Module):
    def __init__(self, d: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class RefAttention(nn.Module):
    def __init__(self, d: int, n_head: int, bias: bool) -> None:
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)
        self.n_head, self.n_embd = n_head, d

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class RefMLP(nn.Module):
    def __init__(self, d: int, h: int, bias: bool) -> None:
        super().__init__()
        self.c_fc, self.gelu, self.c_proj = nn.Linear(d, h, bias=bias), nn.GELU(), nn.Linear(h, d, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class RefSwiGLU(nn.Module):
    """A gated FFN as the transformer libraries write it: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, h: int, bias: bool) -> None:
        super().__init__()
        self.gate, self.up = nn.Linear(d, h, bias=bias), nn.Linear(d, h, bias=bias)
        self.down = nn.Linear(h, d, bias=bias)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class RefBlock(nn.Module):
    def __init__(self, d: int, n_head: int, mlp: nn.Module, norm: str, bias: bool) -> None:
        super().__init__()
        self.ln_1 = RefLayerNorm(d, bias) if norm == "layer" else nn.RMSNorm(d, eps=1e-5)
        self.attn = RefAttention(d, n_head, bias)
        self.ln_2 = RefLayerNorm(d, bias) if norm == "layer" else nn.RMSNorm(d, eps=1e-5)
        self.mlp = mlp

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class RefGPT(nn.Module):
    def __init__(self, c: Cfg, gated: bool) -> None:
        super().__init__()
        m = c.model
        d, h = m.n_embd, 4 * m.n_embd
        self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(m.block_size, d)
        self.h = nn.ModuleList(
            RefBlock(d, m.n_head, RefSwiGLU(d, h, m.bias) if gated else RefMLP(d, h, m.bias), m.norm, m.bias)
            for _ in range(m.n_layer))
        self.ln_f = RefLayerNorm(d, m.bias) if m.norm == "layer" else nn.RMSNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, V, bias=False)
        self.wte.weight = self.lm_head.weight  # tied

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def load(ref: RefGPT, model: stacked_gpt.StackedGPT, m: int, gated: bool) -> None:
    """Member m's weights into the reference ([in, out] -> nn.Linear's [out, in])."""

    def put(dst: nn.Module, w: torch.Tensor, b: torch.Tensor | None) -> None:
        dst.weight.copy_(w.T)
        if b is not None:
            dst.bias.copy_(b[0])

    def put_norm(dst: nn.Module, src: stacked_gpt.MemberNorm) -> None:
        dst.weight.copy_(src.weight[m, 0])
        if src.bias is not None:
            dst.bias.copy_(src.bias[m, 0])

    def bias(lin: stacked_gpt.MemberLinear, cols: slice = slice(None)) -> torch.Tensor | None:
        return None if lin.bias is None else lin.bias[m][:, cols]

    with torch.no_grad():
        ref.wte.weight.copy_(model.wte[m])
        ref.wpe.weight.copy_(model.wpe[m])
        for rb, sb in zip(ref.h, model.blocks):
            put_norm(rb.ln_1, sb.norm_1)
            put_norm(rb.ln_2, sb.norm_2)
            put(rb.attn.c_attn, sb.attn.c_attn.weight[m], bias(sb.attn.c_attn))
            put(rb.attn.c_proj, sb.attn.c_proj.weight[m], bias(sb.attn.c_proj))
            fc, proj = sb.mlp.c_fc, sb.mlp.c_proj
            if gated:  # the registry's Gated: a, b = x.chunk(2, -1); act(a) * b: the gate is the first half
                h = fc.weight.shape[-1] // 2
                put(rb.mlp.gate, fc.weight[m][:, :h], bias(fc, slice(None, h)))
                put(rb.mlp.up, fc.weight[m][:, h:], bias(fc, slice(h, None)))
                put(rb.mlp.down, proj.weight[m], bias(proj))
            else:
                put(rb.mlp.c_fc, fc.weight[m], bias(fc))
                put(rb.mlp.c_proj, proj.weight[m], bias(proj))
        put_norm(ref.ln_f, model.norm_f)


@pytest.mark.parametrize(("act", "model"), [
    ("gelu", {}),
    ("gelu", {"bias": True, "n_embd": 32}),
    ("swiglu", {}),
    ("swiglu", {"bias": True, "norm": "rms"}),
    ("gelu", {"norm": "rms"}),
])
def test_members_agree_with_nanogpt_in_plain_pytorch(act, model):
    cfgs = [cfg(s, act, **model) for s in (1, 2, 3)]
    stack = make(cfgs)
    # trained norms and biases are not ones and zeros: perturb them so the test sees their roles
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for name, p in stack.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    idx, tgt = batch(cfgs)
    logits = stack(idx)
    loss = member_token_cross_entropy(logits, tgt)
    loss.sum().backward()
    gated = act == "swiglu"
    for m, c in enumerate(cfgs):
        ref = RefGPT(c, gated)
        load(ref, stack, m, gated)
        ref_logits, ref_loss = ref(idx[m], tgt[m])
        ref_loss.backward()
        torch.testing.assert_close(logits[m], ref_logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(loss[m], ref_loss, atol=1e-6, rtol=1e-6)
        # the tied head: the embedding's gradient has both uses
        torch.testing.assert_close(stack.wte.grad[m], ref.wte.weight.grad, atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(stack.blocks[0].attn.c_attn.weight.grad[m], ref.h[0].attn.c_attn.weight.grad.T,
                                   atol=1e-6, rtol=1e-4)
    assert stack.per_member_params() == sum(p.numel() for p in ref.parameters())  # nanoGPT's count


# --------------------------------------------------------------------------------------------
# stacked == alone


def train_steps(cfgs: list[Cfg], steps: int = 2, t: int = T):
    """(logits, losses, gradients) of the first step and the parameters after `steps` AdamW steps
    on each member's own batch, in training mode (dropout drawn)."""
    model = make(cfgs)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    idx, tgt = batch(cfgs, t)
    first = None
    for _ in range(steps):
        opt.zero_grad()
        logits = model(idx)
        loss = member_token_cross_entropy(logits, tgt)
        loss.sum().backward()
        if first is None:
            first = (logits.detach(), loss.detach(), [p.grad.clone() for p in model.parameters()])
        opt.step()
    return (*first, [p.detach() for p in model.parameters()])


@pytest.mark.parametrize(("model", "t"), [
    ({}, T),
    ({"dropout": 0.2, "bias": True}, T),
    ({"norm": "rms", "n_embd": 32, "dropout": 0.1}, T),
    ({"block_size": 80, "n_head": 4, "n_embd": 32}, 70),  # several of the flash kernel's blocks of 32 queries
    ({"attn_dropout": 0.2, "dropout": 0.1, "n_head": 4}, T),  # dropout on the attention probabilities too
])
def test_a_member_in_a_stack_equals_the_member_alone_bit_for_bit(model, t):
    # activations of one width share a stack; "alone" is a stack of two copies (the engine pads a
    # lone member so where MKL's one-matrix product rounds differently from its batched one: gpt_alone.py)
    stack = [cfg(10 + i, a, **model) for i, a in enumerate(["gelu", "relu", "silu", "relu2", "gelu"])]
    logits, loss, grads, params = train_steps(stack, t=t)
    for m in (0, 2, 4):
        a_logits, a_loss, a_grads, a_params = train_steps([stack[m], stack[m]], t=t)
        assert torch.equal(logits[m], a_logits[0])
        assert torch.equal(loss[m], a_loss[0])
        assert len(grads) == len(a_grads)
        for g, a in zip(grads, a_grads):
            assert torch.equal(g[m], a[0])
        for p, a in zip(params, a_params):
            assert torch.equal(p[m], a[0])


@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_a_stack_of_one_equals_its_member_in_stacks_of_2_4_8_where_the_probe_allows(act):
    # the engine trains a lone run as a stack of one where gpt_alone.probe finds its bits equal to a
    # pair's (else padded: the test above); then it is the member of any stack, bit for bit
    alone = cfg(10, act, dropout=0.1)
    if not gpt_alone.probe(make, alone, V, (B, 5)):
        pytest.skip("a stack of one rounds differently on this machine: the engine pads lone runs")
    logits, loss, grads, params = train_steps([alone])
    others = ["gelu", "relu", "silu"] if act == "gelu" else ["swiglu", "geglu", "reglu"]
    for n in (2, 4, 8):
        stack = [alone, *(cfg(30 + i, others[i % 3], dropout=0.1) for i in range(n - 1))]
        s_logits, s_loss, s_grads, s_params = train_steps(stack)
        assert torch.equal(s_logits[0], logits[0]) and torch.equal(s_loss[0], loss[0])
        assert len(s_grads) == len(grads) and len(s_params) == len(params)
        assert all(torch.equal(s[0], a[0]) for s, a in zip(s_grads, grads))
        assert all(torch.equal(s[0], a[0]) for s, a in zip(s_params, params))


@pytest.mark.parametrize("where", ["weights", "evaluation"])
def test_the_probe_says_differs_where_a_stack_of_one_computes_other_bits(where):
    alone = cfg(10, dropout=0.1)

    def build(cfgs):  # a stack of one one ulp off: in a weight (every output), or in evaluation only
        model = make(cfgs)
        if len(cfgs) == 1 and where == "weights":
            w = model.blocks[0].mlp.c_fc.weight
            with torch.no_grad():
                w[0, 0, 0] = torch.nextafter(w[0, 0, 0], torch.tensor(1.0))
        if len(cfgs) == 1 and where == "evaluation":
            forward = model.forward
            model.forward = lambda idx, **kw: forward(idx, **kw) * (1 if model.training else 1 + 2**-20)
        return model

    assert not gpt_alone.probe(build, alone, V, (B, 5))


def test_gated_members_in_a_stack_equal_alone_bit_for_bit():
    stack = [cfg(20 + i, a, dropout=0.1) for i, a in enumerate(["swiglu", "geglu", "reglu", "swiglu"])]
    logits, loss, grads, _ = train_steps(stack, steps=1)
    a_logits, a_loss, a_grads, _ = train_steps([stack[1], stack[1]], steps=1)
    assert torch.equal(logits[1], a_logits[0]) and torch.equal(loss[1], a_loss[0])
    assert all(torch.equal(g[1], a[0]) for g, a in zip(grads, a_grads))


def test_dropout_only_in_training_mode_and_from_the_members_own_stream():
    cfgs = [cfg(1, dropout=0.3), cfg(2, dropout=0.3)]
    model = make(cfgs)
    idx, _ = batch(cfgs)
    model.eval()
    ev = model(idx)
    assert torch.equal(ev, model(idx))
    model.train()
    tr = model(idx)
    assert not torch.equal(tr, ev)
    assert torch.equal(make(cfgs).train()(idx), tr)  # the same seeds draw the same masks


def test_attention_dropout_only_in_training_from_its_own_stream():
    both = [cfg(1, dropout=0.3, attn_dropout=0.2), cfg(2, dropout=0.3, attn_dropout=0.2)]
    model = make(both)
    idx, _ = batch(both)
    model.eval()
    ev = model(idx)
    assert torch.equal(ev, make([cfg(1), cfg(2)]).eval()(idx))  # evaluation: no dropout of either kind
    model.train()
    tr = model(idx)
    assert torch.equal(make(both).train()(idx), tr)  # the same seeds draw the same masks
    without = make([cfg(1, dropout=0.3), cfg(2, dropout=0.3)]).train()(idx)
    assert not torch.equal(tr, without)
    # its own stream: model.dropout's masks are the same draws with or without attention dropout
    assert torch.equal(make(both).dropout.mask(4, 5, torch.float32),
                       make([cfg(1, dropout=0.3), cfg(2, dropout=0.3)]).dropout.mask(4, 5, torch.float32))


def test_attention_written_out_equals_the_fused_kernel_where_nothing_is_dropped():
    from activation_bench.engine.models.base import MemberDropout

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2 * 3, 4, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    keep_all = MemberDropout(0.0, [0, 1], {0: torch.Generator(), 1: torch.Generator()}, "cpu")
    assert torch.allclose(stacked_gpt.causal_attention_dropped(q, k, v, keep_all),
                          stacked_gpt.causal_attention(q, k, v), atol=1e-12, rtol=0)


# --------------------------------------------------------------------------------------------
# init, counts, decay groups


def test_init_is_nanogpts():
    c = cfg(3, n_layer=4, n_embd=32, block_size=64, bias=True)
    model = make([c, cfg(4, n_layer=4, n_embd=32, block_size=64, bias=True)])
    proj_std = 0.02 / math.sqrt(2 * 4)
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            assert p.std().item() == pytest.approx(proj_std, rel=0.1), name
        elif name.endswith("weight") and "norm" not in name or name in ("wte", "wpe"):
            assert p.std().item() == pytest.approx(0.02, rel=0.1), name
            assert abs(p.mean().item()) < 0.002, name
        elif "norm" in name and name.endswith("weight"):
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert torch.equal(p, torch.zeros_like(p)), name  # biases
    assert not torch.equal(model.wte[0], model.wte[1])  # each member its own stream
    # the head is the embedding: no separate output weight, and logits are x @ wte^T
    assert not any("head" in n for n, _ in model.named_parameters())
    assert torch.equal(make([c, c]).wte[0], model.wte[0])  # a member's init does not depend on its stack
    idx, _ = batch([c, c])
    with torch.no_grad():
        model.wte[0].mul_(2)
        assert not torch.equal(model(idx)[0], make([c, c])(idx)[0])


@pytest.mark.parametrize(("act", "bias", "norm"), [("gelu", False, "layer"), ("gelu", True, "layer"),
                                                   ("swiglu", True, "layer"), ("swiglu", False, "rms")])
def test_decay_flags_and_parameter_count_are_nanogpts(act, bias, norm):
    c = cfg(1, act, bias=bias, norm=norm)
    model = make([c, c])
    ref = RefGPT(c, act == "swiglu")
    assert model.per_member_params() == sum(p.numel() for p in ref.parameters())
    flags = model.decay_flags()
    params = list(model.parameters())
    assert len(flags) == len(params)
    # nanoGPT's configure_optimizers: dim >= 2 decays (the tied wte/lm_head counted once)
    ref_decay = [p for p in ref.parameters() if p.dim() >= 2]
    ref_no = [p for p in ref.parameters() if p.dim() < 2]
    gated = act == "swiglu"  # the reference's gate and up are the stack's one c_fc
    n_layer = c.model.n_layer
    assert sum(flags) == len(ref_decay) - (n_layer if gated else 0)
    assert len(flags) - sum(flags) == len(ref_no) - (n_layer if gated and bias else 0)
    assert sum(p[0].numel() for p, f in zip(params, flags) if f) == sum(p.numel() for p in ref_decay)
    assert sum(p[0].numel() for p, f in zip(params, flags) if not f) == sum(p.numel() for p in ref_no)


def test_activation_parameters_are_neither_counted_nor_decayed():
    c = cfg(1, "prelu")
    model = make([c, cfg(2, "prelu")])
    assert model.per_member_params() == make([cfg(1), cfg(2)]).per_member_params()
    acts = {id(p) for p in model.acts.parameters()}
    assert acts and all(not f for p, f in zip(model.parameters(), model.decay_flags()) if id(p) in acts)
    assert slices_mod.param_counts(model, 2) == [model.per_member_params() + 2] * 2  # one slope per layer


def test_token_cross_entropy_is_each_members_mean_over_its_tokens():
    logits = torch.randn(2, B, T, V, generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(V, (2, B, T), generator=torch.Generator().manual_seed(1))
    loss = member_token_cross_entropy(logits, tgt)
    for m in range(2):
        torch.testing.assert_close(loss[m], F.cross_entropy(logits[m].reshape(-1, V), tgt[m].reshape(-1)))
    with pytest.raises(ValueError, match="do not match"):
        member_token_cross_entropy(logits, tgt[:, :, :-1])


def test_bad_input_is_refused():
    model = make([cfg(1), cfg(1)])
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(2, 1, 9, dtype=torch.int64))
    with pytest.raises(ValueError, match="multiple of n_head"):
        make([cfg(1, n_embd=15)])
    with pytest.raises(ValueError, match="unknown norm"):
        make([cfg(1, norm="batch")])
    with pytest.raises(NotImplementedError):
        model.hidden(torch.zeros(2, 3, 16))


# --------------------------------------------------------------------------------------------
# dead and saturated feed-forward units (Transformer.unit_shares)


def _shares(model: stacked_gpt.StackedGPT, chars: int = 400) -> tuple[torch.Tensor, torch.Tensor]:
    from activation_bench.engine.models.transformer import Transformer

    x = torch.randint(V, (chars,), generator=torch.Generator().manual_seed(0))
    return Transformer().unit_shares(model.eval(), x[None].expand(len(model.wte), -1))


def test_unit_shares_count_the_feed_forward_units_dead_or_flat_on_every_window():
    # block 0's c_fc zeroed: every unit's input is 0 on every character. relu(0) = 0 with slope 0
    # (dead and saturated); gelu(0) = 0 with slope 0.5 (dead, not saturated); swiglu's output
    # silu(0) * 0 = 0 (dead; gated: no elementwise slope, NaN). Block 1 untouched: live units.
    cfgs = [cfg(1, "relu"), cfg(2, "gelu")]
    model = make(cfgs)
    gated = make([cfg(3, "swiglu"), cfg(4, "swiglu")])
    for m in (model, gated):
        with torch.no_grad():
            m.blocks[0].mlp.c_fc.weight.zero_()
    dead, saturated = _shares(model)
    assert dead.shape == saturated.shape == (2, 2)
    assert dead[0].tolist() == [1.0, 1.0] and saturated[0].tolist() == [1.0, 0.0]
    assert dead[1].tolist() == [0.0, 0.0] and saturated[1].tolist() == [0.0, 0.0]
    dead, saturated = _shares(gated)
    assert dead[0].tolist() == [1.0, 1.0] and dead[1].tolist() == [0.0, 0.0]
    assert saturated.isnan().all()


def test_unit_shares_of_a_member_are_the_same_in_a_stack_and_alone(monkeypatch):
    from activation_bench.engine import diagnostics

    monkeypatch.setattr(diagnostics, "SHARE_BYTES", 1)  # one window per chunk: combine() over 64 chunks
    stack = [cfg(10 + i, a) for i, a in enumerate(["relu", "relu2", "gelu", "relu"])]
    model = make(stack)
    with torch.no_grad():  # five units of member 0 dead on every input: their c_fc columns zero
        model.blocks[1].mlp.c_fc.weight[0, :, :5] = 0.0
    dead, saturated = _shares(model)
    assert 0 < dead[1, 0] < 1 and dead[1, 0] == saturated[1, 0]  # the forced units (and any others) dead
    for m in (0, 1, 2):
        alone = make([stack[m], stack[m]])
        alone.load_state_dict({k: v[[m, m]] if v.dim() and v.shape[0] == 4 else v
                               for k, v in model.state_dict().items()})
        a_dead, a_sat = _shares(alone)
        assert torch.equal(dead[:, m], a_dead[:, 0]) and torch.equal(saturated[:, m], a_sat[:, 0])
