"""Whether a transformer run alone may train as a stack of one (engine/train.py pads it otherwise).

A run alone must equal the same member inside a sweep's stack bit for bit. Every op of the stacked
GPT is per member or per row except the batched products, and a BLAS may send a batch of one
matrix to another kernel than a batch of several (oneMKL: plain sgemm against its batched path),
which can round differently on some CPUs and thread counts. Padding a lone member with a copy of
itself makes its products batched as in any stack, at twice the work. `alone_equals_pair` asks the
machine instead: the member's stack of one and its stack of two copies, built at the run's own
shapes, on the same random tokens, through one training step's forward and backward (dropout
drawn) and an evaluation forward at each held-out batch the run will evaluate; any logit or
gradient of the member that differs in one bit means padding. Random data stands for the run's:
a product sent to a kernel with another summation order differs in some element of such a batch.
Cached per process and per shapes, activation, threads, device and dtype (a few forward passes,
once)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from activation_bench.engine.models.losses import member_token_cross_entropy

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg
    from activation_bench.engine.models.family import Family

_ANSWERS: dict[tuple, bool] = {}


def alone_equals_pair(family: Family, cfg: Cfg, device: str, dtype: torch.dtype) -> bool:
    """Whether cfg's member computes the same bits in a stack of one as in a stack of two copies,
    here (cached; see the module's docstring)."""
    from activation_bench.data import text

    batches = (int(cfg.batch_size), *_eval_batches(cfg))
    key = (family.stack_key(cfg), json.dumps(dict(cfg.activation), sort_keys=True), batches,
           torch.get_num_threads(), device, dtype)
    if key not in _ANSWERS:
        act = key[1]
        _ANSWERS[key] = probe(lambda cfgs: family.build(cfgs, [act] * len(cfgs), device, dtype), cfg,
                              text.vocab_size(cfg), batches)
    return _ANSWERS[key]


def _eval_batches(cfg: Cfg) -> list[int]:
    """The window counts of evaluation's forward passes: each sampled held-out split at once, or the
    validation windows and a whole test split's passes of text.CHUNK windows and its remainder
    (data/text_feed.per_window)."""
    from activation_bench.data import text

    val, test = text.held_out_rows(cfg)
    whole = {min(test, text.CHUNK), test % text.CHUNK} if text.judges_whole(cfg.data) else {test}
    return sorted(({val} | whole) - {0})


def probe(build: Callable[[list[Cfg]], Any], cfg: Cfg, vocab: int, batches: tuple[int, ...]) -> bool:
    """Whether build([cfg]) computes the bits of build([cfg, cfg])'s first member: one training step's
    logits and gradients on batches[0] random windows (training mode), then the logits of an
    evaluation forward on each of batches[1:] windows."""
    alone, pair = build([cfg]), build([cfg, cfg])
    device = next(alone.parameters()).device
    gen = torch.Generator().manual_seed(0)
    t = int(cfg.model.block_size)
    idx, tgt = (torch.randint(vocab, (1, batches[0], t), generator=gen).to(device) for _ in range(2))
    evals = [torch.randint(vocab, (1, b, t), generator=gen).to(device) for b in batches[1:]]
    outs = []
    for m, model in ((1, alone), (2, pair)):
        model.train()
        logits = model(idx.expand(m, -1, -1))
        member_token_cross_entropy(logits, tgt.expand(m, -1, -1)).sum().backward()
        outs.append([logits.detach(), *(p.grad for p in model.parameters())])
        model.eval()
        with torch.no_grad():
            outs[-1] += [model(ev.expand(m, -1, -1)) for ev in evals]
    return len(outs[0]) == len(outs[1]) and all(_member_equal(a, b) for a, b in zip(*outs))


def _member_equal(alone: Any, pair: Any) -> bool:
    """Whether a stack of one's tensor [1, ...] is the pair's first member, bit for bit."""
    if alone is None or pair is None:
        return alone is None and pair is None
    return alone.shape[0] == 1 and pair.shape[0] == 2 and torch.equal(alone[0], pair[0])
