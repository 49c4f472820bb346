"""Transformer throughput: `actbench sweep model=transformer` against a plain PyTorch loop training
one nanoGPT-style model at a time, both as whole processes, side by side in one run; and the share of
torch.bmm's rate at the model's own product shapes that the sweep's marginal epochs reach.

Grid: 8 activations x 2 seeds of a tiny GPT (n_layer 2, n_head 2, n_embd 64, block 32, batch 8;
AdamW lr 1e-3, weight decay 0.1, beta2 0.99, gradient clip 1.0), 10 epochs of 100 steps (1,000
steps) on data=python_docs (the interpreter's documentation text: no download), 32 fixed
validation and test windows evaluated every epoch. --config readme: nanoGPT's README CPU model
(n_layer 4, n_head 4, n_embd 128, block 64, batch 12) over 4 models, 2 epochs of 100 steps.

- actbench: the real command, `actbench sweep ...` in a fresh process, timed whole.
- plain: a fresh Python process with nanoGPT's model written in plain PyTorch (nn.Linear,
  nn.Embedding, nn.LayerNorm, F.scaled_dot_product_attention, the tied head), torch.optim.AdamW with
  nanoGPT's decay groups, clip_grad_norm_, get_batch's random windows, the same evaluation every
  epoch; --plain-models models of the grid give its model steps per second, start-up included.
  Model i takes the grid's activation i (cycling), so that by default (one model per activation of
  the grid) the loop trains the same mix of activations as the sweep: mish and elu cost more than
  relu, and a loop over the cheap ones only would flatter it.

The ratio is the median over interleaved rounds of model steps per second. Each round also times the
sweep at a fifth of the epochs: the difference is the marginal time of the extra epochs, whose FLOPs
(6 x the non-embedding parameters and 12 x n_layer x T x d per token for attention, and the head:
6 x d x vocab per token, forward and backward; roofline-style) are printed against torch.bmm's rate
at the step's products, timed around the rounds. The goal: the tiny grid at least 2.5x the plain loop.

Usage:
    python -m benchmarks.transformer_throughput [--config tiny|readme] [--repeat 3] [--plain-models N]
    python -m benchmarks.transformer_throughput --jobs 2     # the sweep as 2 processes of one thread each
    python -m benchmarks.transformer_throughput --quick      # a smoke run: 2 epochs, 1 round
    python -m benchmarks.transformer_throughput --plain N_MODELS EPOCHS CONFIG   # the plain worker (internal)
"""

from __future__ import annotations

from benchmarks import harness, provenance, roofline
from benchmarks.plain import SHORT, SWEEP, sweep_vs_plain

ACTS = ["gelu", "relu", "silu", "relu2", "tanh", "elu", "mish", "leaky_relu"]
CONFIGS = {  # n_layer, n_head, n_embd, block, batch, members, epochs
    "tiny": (2, 2, 64, 32, 8, 16, 10),
    "readme": (4, 4, 128, 64, 12, 4, 2),
}
STEPS, EVAL_WINDOWS, LR = 100, 32, 1e-3


def grid_acts(config: str) -> list[str]:
    """The activations of the config's sweep (each on 2 seeds)."""
    members = CONFIGS[config][5]
    return ACTS[:members // 2] if members < 16 else ACTS


def _overrides(config: str, epochs: int) -> list[str]:
    n_layer, n_head, n_embd, block, batch, members, _ = CONFIGS[config]
    return ["model=transformer", "data=python_docs", f"model.n_layer={n_layer}", f"model.n_head={n_head}",
            f"model.n_embd={n_embd}", f"model.block_size={block}", f"batch_size={batch}", f"epochs={epochs}",
            f"data.steps={STEPS}", f"data.eval_windows={EVAL_WINDOWS}", f"lr={LR}", "weight_decay=0.1", "beta2=0.99",
            "grad_clip=1.0", "-q", f"activation={','.join(grid_acts(config))}",
            f"seed=range({2 if members >= 2 else 1})"]


def plain(models: int, epochs: int, config: str) -> int:
    """nanoGPT's model and loop in plain PyTorch, one model at a time; returns the model steps."""
    import math

    import torch
    from torch import nn
    from torch.nn import functional as F

    from activation_bench.config.compose import compose
    from activation_bench.data import text
    from activation_bench.engine.activations.registry import create

    n_layer, n_head, d, block, batch, _, _ = CONFIGS[config]
    data = text.make_dataset(compose(_overrides(config, epochs)[:10]))
    train, vocab = data.x, data.info["vocab_size"]
    evals = [(data.x_val, data.y_val), (data.x_test, data.y_test)]

    class Block(nn.Module):
        def __init__(self, act: nn.Module) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
            self.c_attn, self.attn_proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.c_fc, self.c_proj, self.act = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False), act

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = (z.view(b, t, n_head, d // n_head).transpose(1, 2) for z in self.c_attn(self.ln_1(x)).split(d, 2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.attn_proj(y)
            return x + self.c_proj(self.act(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, act: str) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.blocks = nn.ModuleList(Block(create(act)) for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(d, bias=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    proj = name.endswith(("c_proj.weight", "attn_proj.weight"))
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer) if proj else 0.02)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.T

    steps, acts = 0, grid_acts(config)
    for i in range(models):
        torch.manual_seed(i)
        model = GPT(acts[i % len(acts)])
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                lr=LR, betas=(0.9, 0.99), fused=True)
        gen = torch.Generator().manual_seed(i)
        for _ in range(epochs):
            for _ in range(STEPS):
                ix = torch.randint(len(train) - block, (batch,), generator=gen)
                x = torch.stack([train[j:j + block] for j in ix])
                y = torch.stack([train[j + 1:j + 1 + block] for j in ix])
                loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                steps += 1
            with torch.no_grad():
                for xe, ye in evals:
                    F.cross_entropy(model(xe).view(-1, vocab), ye.view(-1))
    return steps


def flops_per_step(config: str) -> tuple[float, list[tuple[int, int, int, str]]]:
    """A model step's FLOPs (nanoGPT's estimate: 6 N per token for the non-embedding parameters N,
    12 x n_layer x T x d per token for attention, 6 d V per token for the tied head) and its products
    (rows, inner, cols, layout) for torch.bmm's rate: each Linear forward and both gradients."""
    n_layer, _, d, block, batch, _, _ = CONFIGS[config]
    vocab, tokens = 103, batch * block  # python_docs' distinct characters
    per_layer = [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)]
    n = n_layer * sum(a * b for a, b in per_layer)
    flops = tokens * (6.0 * n + 12.0 * n_layer * block * d + 6.0 * d * vocab)
    products = [p for a, b in per_layer * n_layer + [(d, vocab)]
                for p in ((tokens, a, b, "nn"), (a, tokens, b, "tn"), (tokens, b, a, "nt"))]
    return flops, products


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--config", choices=CONFIGS, default="tiny")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plain-models", type=int, default=None,
                        help="models the plain loop trains (default: one per activation of the grid, at least 4)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=1,
                        help="with N > 1 the sweep runs as N processes (--launcher joblib --jobs N), each with "
                             "cores/N torch threads; the plain loop is unchanged")
    parser.add_argument("--plain", nargs=3, metavar=("MODELS", "EPOCHS", "CONFIG"))
    args = parser.parse_args()
    if args.plain:
        print(plain(int(args.plain[0]), int(args.plain[1]), args.plain[2]))
        return
    config = args.config
    if args.plain_models is None:
        args.plain_models = max(4, len(grid_acts(config)))
    *_, members, epochs = CONFIGS[config]
    if args.quick:
        epochs, args.repeat = 2, 1
    short = max(1, epochs // 5)
    import torch

    bench = harness.Bench(args, compile_bytecode=True)
    print(f"transformer throughput, --config {config}: {members} models x {epochs * STEPS} steps; "
          f"{torch.get_num_threads()} threads; torch {torch.__version__}; {args.jobs} sweep process(es)")
    jobs = ["--launcher", "joblib", "--jobs", str(args.jobs)] if args.jobs > 1 else []

    def sweep(epochs_: int):  # noqa: ANN202
        return lambda runs: [*provenance.actbench(), "sweep", *_overrides(config, epochs_), "--runs-dir", runs,
                             "--name", "b", *jobs]

    flops, products = flops_per_step(config)
    rates: list[float] = []
    worker = [*provenance.module("benchmarks.transformer_throughput"), "--plain", str(args.plain_models), str(epochs),
              config]
    ratio, times = sweep_vs_plain(bench, sweep(epochs), worker, members * epochs * STEPS, args.repeat,
                                  "plain PyTorch loop (nanoGPT's model)", sweep(short),
                                  lambda: rates.append(roofline.products_rate(members, products)),
                                  goal=">= 2.5" if config == "tiny" else None)
    marginal = min(w - s for w, s in zip(times[SWEEP], times[SHORT])) / (members * (epochs - short) * STEPS)
    rate = max(rates)
    print(f"marginal model-step {1e3 * marginal:.2f} ms: {flops / marginal / 1e9:.1f} GFLOP/s against torch.bmm's "
          f"{rate:.1f} GFLOP/s at the step's products over {members} members = {flops / marginal / 1e9 / rate:.2f} "
          f"of the product rate; actbench / plain {ratio:.2f}x")
    bench.figure("share of bmm's best rate, marginal model-step (the best round)", [flops / marginal / 1e9 / rate],
                 unit="")
    bench.note(marginal_model_step_seconds=marginal, bmm_gflops=rates)
    bench.finish(times)


if __name__ == "__main__":
    main()
