"""The GPT, as a stack of independent decoder-only, pre-norm transformers trained at once.

Member m is nanoGPT's model.py with a member axis in front of every tensor:
    x = drop(wte[m][idx] + wpe[m][:T])
    per block: x = x + drop(attn(norm_1(x)));  x = x + drop(ffn(norm_2(x)))
    logits = norm_f(x) @ wte[m]^T                (the output head tied to the token embedding)
with attn one c_attn (d -> 3d), causal attention over n_head heads and c_proj (d -> d), and ffn
c_fc (d -> h1), the member's activation (h1 -> h2; a gated one halves the width) and c_proj
(h2 -> d). Every Linear is a batched product over members: weights [M, in, out], activations
[M, B*T, in]; biases [M, 1, out] where model.bias is set (off by default, as nanoGPT's CPU recipe;
the norms then have no bias either). model.norm is "layer" (LayerNorm) or "rms" (RMSNorm, a
weight only), eps 1e-5. Dropout (model.dropout, training only) follows the embedding sum and
each c_proj, with masks from each member's own "dropout" stream (base.MemberDropout); dropout on
the attention probabilities (nanoGPT's attn_dropout) is model.attn_dropout, with masks from each
member's own "attn_dropout" stream (its own, so that turning it on leaves model.dropout's masks as
they were).

Every op is per member or per row, so a member computes the same values in any stack as alone
(bit for bit on CPU, forward and gradients: tests/test_stacked_gpt.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from activation_bench.data.synthetic import generator
from activation_bench.engine.models.base import MemberDropout, MemberLayers, Slice

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

NORMS = ("layer", "rms")
EPS = 1e-5
STD = 0.02  # nanoGPT's init: normal(0, 0.02) for every Linear weight and both embeddings


class MemberLinear(nn.Module):
    """A Linear per member: weight [M, in, out] (nn.Linear's [out, in] transposed), bias [M, 1, out]
    or None. x [M, N, in] -> [M, N, out], one batched product for every member."""

    def __init__(self, weight: torch.Tensor, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(weight.new_zeros(weight.shape[0], 1, weight.shape[2])) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.weight) if self.bias is None else torch.baddbmm(self.bias, x, self.weight)


class MemberNorm(nn.Module):
    """LayerNorm ("layer") or RMSNorm ("rms") over the last dim, per member: weight [M, 1, d] (ones),
    bias [M, 1, d] (zeros; LayerNorm with bias only). x [M, N, d] -> [M, N, d]. The normalization
    is torch's per-row kernel; the per-member scale and shift follow it (torch's kernels take one
    weight for all rows)."""

    def __init__(self, kind: str, members: int, d: int, bias: bool, dtype: torch.dtype, device: str) -> None:
        super().__init__()
        if kind not in NORMS:
            raise ValueError(f"unknown norm '{kind}' for the transformer; valid: {', '.join(NORMS)}")
        self.kind = kind
        self.weight = nn.Parameter(torch.ones(members, 1, d, dtype=dtype, device=device))
        self.bias = (nn.Parameter(torch.zeros(members, 1, d, dtype=dtype, device=device))
                     if bias and kind == "layer" else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1:]
        h = F.layer_norm(x, d, eps=EPS) if self.kind == "layer" else F.rms_norm(x, d, eps=EPS)
        return h * self.weight if self.bias is None else torch.addcmul(self.bias, h, self.weight)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd), masked above the diagonal) v for q, k, v [M*B, H, T, hd].

    One scaled_dot_product_attention call for every member, sequence and head. On CPU (float32 and
    float64) torch picks its flash kernel, which works on each (sequence, head, block of queries)
    on its own, with block sizes set by T alone: a member's values and gradients do not depend on
    the stack's size or its place in it, so no hand-written masked softmax is needed (checked bit
    for bit in tests/test_stacked_gpt.py; other backends are not checked)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def causal_attention_dropped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             drop: MemberDropout) -> torch.Tensor:
    """causal_attention with dropout on the attention probabilities, nanoGPT's manual path written
    out (softmax(q k^T / sqrt(hd), masked) -> attn_dropout -> @ v), for q, k, v [M*B, H, T, hd]: the
    fused kernel draws its masks from torch's global generator, a member's own stream needs them
    here. The masks [M, B*H*T, T] come from `drop` (one draw per distinct seed, as every dropout)."""
    mb, h, t, hd = q.shape
    att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    above = torch.ones(t, t, dtype=torch.bool, device=q.device).triu_(1)
    att = att.masked_fill(above, float("-inf")).softmax(dim=-1)
    keep = drop.mask(mb // len(drop.seeds) * h * t, t, att.dtype).view(mb, h, t, t)
    return torch.matmul(att * keep, v)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, every member and head at once: x [M, B*T, d] ->
    [M, B*T, d]. c_attn: [M, d, 3d] (q, k, v in that order along the output), c_proj [M, d, d]."""

    def __init__(self, c_attn: torch.Tensor, c_proj: torch.Tensor, n_head: int, bias: bool) -> None:
        super().__init__()
        self.c_attn = MemberLinear(c_attn, bias)
        self.c_proj = MemberLinear(c_proj, bias)
        self.n_head = n_head

    def forward(self, x: torch.Tensor, batch: int, drop: MemberDropout | None = None) -> torch.Tensor:
        m, rows, d = x.shape
        t, h = rows // batch, self.n_head
        # [M, B*T, 3d] -> q, k, v each [M*B, H, T, hd], as nanoGPT's split / view / transpose
        q, k, v = (z.reshape(m * batch, t, h, d // h).transpose(1, 2) for z in self.c_attn(x).split(d, dim=2))
        y = causal_attention(q, k, v) if drop is None else causal_attention_dropped(q, k, v, drop)  # [M*B, H, T, hd]
        return self.c_proj(y.transpose(1, 2).reshape(m, rows, d))


class MLP(nn.Module):
    """The feed-forward block: c_fc [M, d, h1], the activation (h1 -> h2, given per call: the
    stack's slices of members), c_proj [M, h2, d]. x [M, B*T, d] -> [M, B*T, d]."""

    def __init__(self, c_fc: torch.Tensor, c_proj: torch.Tensor, bias: bool) -> None:
        super().__init__()
        self.c_fc = MemberLinear(c_fc, bias)
        self.c_proj = MemberLinear(c_proj, bias)

    def forward(self, x: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor],
                preacts: list[torch.Tensor] | None = None) -> torch.Tensor:
        h = self.c_fc(x)
        if preacts is not None:  # the activation's input, for the unit shares (StackedGPT.ffn_inputs)
            preacts.append(h)
        return self.c_proj(act(h))


class Block(nn.Module):
    """x = x + drop(attn(norm_1(x))); x = x + drop(mlp(norm_2(x))), x [M, B*T, d]."""

    def __init__(self, attn: CausalSelfAttention, mlp: MLP, norm: str, bias: bool) -> None:
        super().__init__()
        m, d = attn.c_proj.weight.shape[0], attn.c_proj.weight.shape[2]
        dtype, device = attn.c_proj.weight.dtype, str(attn.c_proj.weight.device)
        self.norm_1 = MemberNorm(norm, m, d, bias, dtype, device)
        self.attn = attn
        self.norm_2 = MemberNorm(norm, m, d, bias, dtype, device)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, batch: int, act: Callable[[torch.Tensor], torch.Tensor],
                drop: Callable[[torch.Tensor], torch.Tensor],
                preacts: list[torch.Tensor] | None = None, attn_drop: MemberDropout | None = None) -> torch.Tensor:
        x = x + drop(self.attn(self.norm_1(x), batch, attn_drop))
        return x + drop(self.mlp(self.norm_2(x), act, preacts))


def member_weights(n_layer: int, d: int, vocab_size: int, block_size: int, h1: int, h2: int,
                   gen: torch.Generator, dtype: torch.dtype) -> list[torch.Tensor]:
    """A member's matrices as nanoGPT initialises them, drawn from gen in this order:
    wte [V, d], wpe [block_size, d], then per layer c_attn, attention's c_proj, c_fc, the FFN's
    c_proj. Each is normal(0, 0.02) except both c_proj, normal(0, 0.02 / sqrt(2 n_layer)) (GPT-2's
    scaling of the residual projections). Linear weights are drawn as nn.Linear stores them
    ([out, in]) and returned [in, out]. Drawn in float32 and converted to dtype (a float64 run starts
    from the float32 run's weights). Biases are zero and norms one: no draws."""

    def normal(*shape: int, std: float = STD) -> torch.Tensor:
        return torch.empty(shape).normal_(0.0, std, generator=gen)

    proj_std = STD / math.sqrt(2 * n_layer)
    out = [normal(vocab_size, d), normal(block_size, d)]
    for _ in range(n_layer):
        out += [normal(3 * d, d).t(), normal(d, d, std=proj_std).t(),  # attention's c_attn, c_proj
                normal(h1, d).t(), normal(d, h2, std=proj_std).t()]  # the FFN's c_fc, c_proj
    return [w.contiguous().to(dtype) for w in out]


class StackedGPT(MemberLayers):
    """M GPTs: idx [M, B, T] (token ids) -> logits [M, B, T, V]. The FFN's activation is applied per
    slice of members (MemberLayers.activate; `slices[i].modules[layer]` serves block `layer`)."""

    def __init__(self, wte: torch.Tensor, wpe: torch.Tensor, blocks: list[Block], norm: str, bias: bool,
                 slices: list[Slice], dropout: MemberDropout | None = None,
                 attn_dropout: MemberDropout | None = None) -> None:
        super().__init__()
        self.wte = nn.Parameter(wte)  # [M, V, d], also the output head
        self.wpe = nn.Parameter(wpe)  # [M, block_size, d]
        self.blocks = nn.ModuleList(blocks)
        self.norm_f = MemberNorm(norm, wte.shape[0], wte.shape[2], bias, wte.dtype, str(wte.device))
        self.dropout = dropout
        self.attn_dropout = attn_dropout  # on the attention probabilities (model.attn_dropout)
        self._init_layers(slices, [b.mlp.c_fc.weight for b in blocks], "none")

    @property
    def depth(self) -> int:  # type: ignore[override]
        return len(self.blocks)

    @property
    def block_size(self) -> int:
        return self.wpe.shape[1]

    def _own_params(self) -> list[nn.Parameter]:
        """The model's parameters, every one [M, ...], without the activations' (PReLU's etc.)."""
        acts = {id(p) for p in self.acts.parameters()}
        return [p for p in self.parameters() if id(p) not in acts]

    def per_member_params(self) -> int:
        """One member's parameters as nanoGPT's get_num_params(non_embedding=False) counts them: the
        position embedding included and the tied head counted once (as wte). Activation parameters
        are counted by slices.param_counts."""
        return sum(p[0].numel() for p in self._own_params())

    def decay_flags(self) -> list[bool]:
        """Per entry of list(self.parameters()): whether weight decay applies, as nanoGPT's
        configure_optimizers: matrices and embeddings (its dim >= 2) decay; biases, norm weights
        and activation parameters do not (biases and norm weights are stored [M, 1, n] here, so
        the rule is by role rather than by shape)."""
        decay = {id(self.wte), id(self.wpe)} | {id(m.weight) for m in self.modules() if isinstance(m, MemberLinear)}
        return [id(p) in decay for p in self.parameters()]

    def activation_shapes(self, rows: int) -> list[tuple[int, int]]:
        """Each block's activation input per member on `rows` tokens (B*T): (rows, h1)."""
        return [(rows, b.mlp.c_fc.weight.shape[-1]) for b in self.blocks]

    def pre_activation(self, layer: int, a: torch.Tensor, batch_stats: bool | None = None) -> torch.Tensor:
        raise NotImplementedError("StackedGPT has no MLP-style hidden layers: its FFN runs inside each block")

    def next_input(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("StackedGPT has no MLP-style hidden layers: its FFN runs inside each block")

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x) if self.dropout is not None and self.training else x

    @torch.no_grad()
    def ffn_inputs(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """Each block's feed-forward activation input c_fc(norm_2(x)) [M, B*T, h1] on idx [M, B, T]
        (call in eval mode: no dropout), for the dead and saturated unit shares."""
        preacts: list[torch.Tensor] = []
        self(idx, preacts=preacts)
        return preacts

    def forward(self, idx: torch.Tensor, record: list[torch.Tensor] | None = None,
                preacts: list[torch.Tensor] | None = None) -> torch.Tensor:
        """idx [M, B, T] (int64, T <= block_size) -> logits [M, B, T, V]. `record` is the training loop's
        gradient-norm log, which model=transformer refuses (log.grad_norms): it must be None. With
        `preacts`, each block's feed-forward activation input is appended to it."""
        if record is not None:
            raise ValueError("StackedGPT records no hidden-layer outputs (log.grad_norms is refused for it)")
        m, b, t = idx.shape
        vocab, d = self.wte.shape[1:]
        if t > self.block_size:
            raise ValueError(f"cannot forward a sequence of length {t}: block_size is only {self.block_size}")
        # each member's ids index its own rows of the members' embeddings laid end to end
        offsets = torch.arange(m, device=idx.device).mul_(vocab).view(m, 1, 1)
        tok = F.embedding(idx + offsets, self.wte.reshape(m * vocab, d))  # [M, B, T, d]
        x = self._drop((tok + self.wpe[:, None, :t]).reshape(m, b * t, d))  # [M, B*T, d]
        attn_drop = self.attn_dropout if self.training else None
        for layer, block in enumerate(self.blocks):
            x = block(x, b, lambda h, layer=layer: self.activate(layer, h), self._drop, preacts, attn_drop)
        x = self.norm_f(x)
        # the head tied to the token embedding: logits = x @ wte^T per member
        return torch.bmm(x, self.wte.transpose(1, 2)).view(m, b, t, vocab)


def build(ordered: Sequence[Cfg], slices: list[Slice], vocab_size: int, h1: int, h2: int, device: str,
          dtype: torch.dtype) -> StackedGPT:
    """The stacked GPT of these members (sharing model.n_layer, n_head, n_embd, block_size, dropout,
    attn_dropout, bias, norm), each initialised from its own seed's "init" stream (member_weights),
    with dropout masks from its "dropout" stream where model.dropout > 0 and attention dropout masks
    from its "attn_dropout" stream where model.attn_dropout > 0. `slices`: slices.slices_for(ordered,
    keys, n_layer, device, dtype); (h1, h2): the FFN's widths before and after the activation."""
    model = ordered[0].model
    n_layer, n_head, d = int(model.n_layer), int(model.n_head), int(model.n_embd)
    if d % n_head:
        raise ValueError(f"n_embd {d} is not a multiple of n_head {n_head}")
    bias, norm = bool(model.bias), str(model.norm)
    mem = [member_weights(n_layer, d, vocab_size, int(model.block_size), h1, h2, generator(c.seed, "init"), dtype)
           for c in ordered]

    def stacked(i: int) -> torch.Tensor:
        return torch.stack([w[i] for w in mem]).to(device)

    blocks = []
    for layer in range(n_layer):
        i = 2 + 4 * layer
        attn = CausalSelfAttention(stacked(i), stacked(i + 1), n_head, bias)
        blocks.append(Block(attn, MLP(stacked(i + 2), stacked(i + 3), bias), norm, bias))
    seeds = [c.seed for c in ordered]

    def dropout(p: float, stream: str) -> MemberDropout | None:
        return MemberDropout(p, seeds, {s: generator(s, stream) for s in dict.fromkeys(seeds)}, device) if p else None

    return StackedGPT(stacked(0), stacked(1), blocks, norm, bias, slices, dropout(float(model.dropout), "dropout"),
                      dropout(float(model.get("attn_dropout", 0.0)), "attn_dropout"))
