"""model=transformer: a decoder-only, pre-norm GPT as nanoGPT's model.py builds it, trained on
characters (data=text, python_docs, shakespeare). The compared activation is the feed-forward
block's; the stacked model is stacked_gpt.py.

The feed-forward block's widths (`ffn_widths`): ungated, d -> ffn_mult x d -> d. A gated unit
(glu, bilinear, reglu, geglu, swiglu) has two input projections, so with model.ffn_match=params
(the default, as Shazeer 2020 and LLaMA) its hidden width is 2/3 of that, rounded to the nearest
integer (Python's round: 341 for d=128 and ffn_mult=4, against 512 ungated; 3 x 128 x 341 =
130,944 weights against 2 x 128 x 512 = 131,072), and with ffn_match=width it keeps ffn_mult x d
(1.5x the block's weights). Each run's summary gives its parameter count (n_params)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from activation_bench.data.text import CHUNK
from activation_bench.engine.models.family import Family, Memory

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

NORMS = ("layer", "rms")
FFN_MATCH = ("params", "width")
SHARE_WINDOWS = 64  # fixed training windows the dead and saturated unit shares are taken on


@dataclass
class TransformerConfig:
    """model=transformer (configs/model/transformer.yaml): nanoGPT's GPT, character level."""

    name: str = "transformer"
    n_layer: int = 4  # blocks of attention and feed-forward
    n_head: int = 4  # attention heads (n_embd must be a multiple)
    n_embd: int = 128  # the residual stream's width d
    block_size: int = 64  # characters of context (each training window has block_size + 1)
    ffn_mult: int = 4  # the feed-forward block's hidden width, in multiples of n_embd (ungated)
    ffn_match: str = "params"  # params | width: a gated unit's hidden width (see the module's docstring)
    dropout: float = 0.0  # after the embeddings, attention's and the feed-forward block's outputs
    attn_dropout: float = 0.0  # on the attention probabilities (nanoGPT's attn_dropout takes its dropout)
    bias: bool = False  # biases in the Linears and norms (nanoGPT's CPU recipe: none)
    norm: str = "layer"  # layer | rms


def ffn_widths(cfg: Cfg) -> tuple[int, int]:
    """(the feed-forward block's first projection width, the activation's output width)."""
    from activation_bench.engine.activations import registry as activations

    m = cfg.model
    hidden = m.ffn_mult * m.n_embd
    if not activations.is_gated(dict(cfg.activation)):
        return hidden, hidden
    h = max(1, round(hidden * 2 / 3)) if m.ffn_match == "params" else hidden
    return 2 * h, h


def _vocab(cfg: Cfg) -> int:
    from activation_bench.data import text

    return text.vocab_size(cfg)


class Transformer(Family):
    name = "transformer"
    schema = TransformerConfig
    trains_beside = True  # every dropout mask from the member's own stream (stacked_gpt.py)
    # evaluation passes take CHUNK windows at a time, as a whole split's do (whole_split.py): one pass
    # over nanoGPT's 240 sampled windows streams [members, 15,360, 512] activations through memory;
    # 64 windows a pass took 1.5-1.9 s against 2.4-2.8 s for 4 members (2026-12-02), the same bits
    eval_rows = CHUNK

    def validate(self, cfg: Cfg, where: str) -> None:
        from activation_bench.data import text
        from activation_bench.engine.models import checks as v
        from activation_bench.errors import check

        m = cfg.model
        check(text.is_text(cfg.data), f"model=transformer models text ({', '.join(text.TEXT)}); "
                f"data={cfg.data.name} is not (use model=mlp or model=cnn)", where)
        for key in ("n_layer", "n_head", "n_embd", "block_size", "ffn_mult"):
            check(isinstance(m[key], int) and m[key] >= 1, f"model.{key} must be a positive integer, got {m[key]}",
                    where)
        check(m.n_embd % m.n_head == 0, f"model.n_embd ({m.n_embd}) must be a multiple of model.n_head "
                f"({m.n_head}): each head takes n_embd / n_head of it", where)
        check(m.norm in NORMS, f"unknown model.norm '{m.norm}' for model=transformer; valid: {', '.join(NORMS)}",
                where)
        check(m.ffn_match in FFN_MATCH, f"unknown model.ffn_match '{m.ffn_match}'; valid: {', '.join(FFN_MATCH)}",
                where)
        v.check_dropout(m.dropout, where)
        v.check_dropout(m.attn_dropout, where, "model.attn_dropout")
        check(not cfg.activation.get("param_matched"), "activation.param_matched is the MLP's; with "
                "model=transformer a gated unit's width is model.ffn_match's (params by default)", where)
        check(not cfg.log.grad_norms and not cfg.log.preact_stats and not cfg.log.train_eval, "log.grad_norms, "
                "log.preact_stats and log.train_eval apply to an MLP or a convnet; model=transformer does not write "
                "them (its training loss is on random windows, its validation and test losses on fixed ones)", where)

    def describe(self, model: dict[str, Any]) -> str:
        parts = [f"GPT {model['n_layer']} x {model['n_embd']}, {model['n_head']} heads, block {model['block_size']}",
                 f"FFN x{model['ffn_mult']} ({model['ffn_match']}-matched)", f"{model['norm']} norm"]
        parts += ["bias"] if model.get("bias") else []
        parts += [f"dropout {model['dropout']:g}"] if model.get("dropout") else []
        parts += [f"attention dropout {model['attn_dropout']:g}"] if model.get("attn_dropout") else []
        return ", ".join(parts)

    def layers(self, model: dict[str, Any]) -> int:
        return int(model["n_layer"])

    def stack_key(self, cfg: Cfg) -> tuple:
        m = cfg.model
        return ("transformer", _vocab(cfg), m.n_layer, m.n_head, m.n_embd, m.block_size, ffn_widths(cfg),
                float(m.dropout), float(m.attn_dropout), bool(m.bias), m.norm)

    def params(self, cfg: Cfg) -> int:
        """One member's parameters (the head tied to the token embedding, counted once)."""
        m, v = cfg.model, _vocab(cfg)
        d, (h1, h2) = m.n_embd, ffn_widths(cfg)
        bias = bool(m.bias)
        norm = d * (2 if bias and m.norm == "layer" else 1)
        attn = 4 * d * d + (4 * d if bias else 0)
        ffn = d * h1 + h2 * d + ((h1 + d) if bias else 0)
        return v * d + m.block_size * d + m.n_layer * (attn + ffn + 2 * norm) + norm

    def memory(self, cfg: Cfg) -> Memory:
        """Parameters; a training step's saved values (per token and block: the norms, q, k, v,
        attention's output and its T x T weights per head, three of them, five with attention
        dropout's written-out attention: scores, probabilities, mask, dropped; the feed-forward
        block's widths; the logits) over a batch; an evaluation pass's largest block of values over
        the fixed windows (nothing kept for backward); the characters."""
        from activation_bench.data import text

        m = cfg.model
        d, (h1, h2), t, v = m.n_embd, ffn_widths(cfg), m.block_size, _vocab(cfg)
        weights = 5 if m.attn_dropout else 3
        train = m.n_layer * (12 * d + 2 * h1 + h2 + weights * m.n_head * t) + 3 * v
        evaluate = 4 * d + h1 + h2 + m.n_head * t + 2 * v
        val, test = text.held_out_rows(cfg)  # a whole test split is evaluated CHUNK windows at a time
        rows = val if not text.judges_whole(cfg.data) else max(val, min(test, text.CHUNK))
        values = cfg.batch_size * t * train + rows * t * evaluate
        if text.judges_whole(cfg.data):  # each member's best-validation weights, kept for the whole test split
            values += self.params(cfg)
        return Memory(self.params(cfg), values + sum(text.split_sizes(cfg)), [h1] * m.n_layer)

    def macs(self, cfg: Cfg) -> int:
        m = cfg.model
        d, (h1, h2), t = m.n_embd, ffn_widths(cfg), m.block_size
        return t * (m.n_layer * (4 * d * d + d * h1 + h2 * d + t * d) + d * _vocab(cfg))

    def unit_shares(self, model: Any, x: Any) -> tuple[Any, Any]:
        """Per block and member, the share of the feed-forward block's units dead (output exactly 0)
        and saturated (|f'| < 1e-3; NaN for gated units) on every character of SHARE_WINDOWS fixed
        windows evenly spaced over the training split x [M, characters] (text.fixed_windows: the same
        for every member, so shares are paired), passed through in chunks (diagnostics.combine)."""
        from activation_bench.data.text import fixed_windows
        from activation_bench.engine.diagnostics import SHARE_BYTES, activated, combine

        m, block, h1 = x.shape[0], model.block_size, model.activation_shapes(1)[0][1]
        idx = fixed_windows(x, block, SHARE_WINDOWS)  # [M, windows, block]
        per_window = m * block * h1 * model.wte.element_size()
        chunks = []
        for part in idx.split(max(1, SHARE_BYTES // per_window), dim=1):
            chunks.append([activated(model, layer, h)[1] for layer, h in enumerate(model.ffn_inputs(part))])
        return combine(chunks, model.depth, model.wte.dtype)

    def pads_alone(self, cfg: Cfg, device: str, dtype: Any) -> bool:
        """Only where this machine's stack of one computes other bits than a stack of two
        (gpt_alone.py: probed once per process and shapes)."""
        from activation_bench.engine.models import gpt_alone

        return not gpt_alone.alone_equals_pair(self, cfg, device, dtype)

    def build(self, ordered: Sequence[Cfg], keys: list[str], device: str, dtype: Any) -> Any:
        from activation_bench.engine.models import slices, stacked_gpt

        first = ordered[0]
        h1, h2 = ffn_widths(first)
        members = slices.slices_for(ordered, keys, first.model.n_layer, device, dtype)
        return stacked_gpt.build(ordered, members, _vocab(first), h1, h2, device, dtype)

