"""The training engine: trains a stack of members at once and returns their losses.

Members that share shapes and optimiser settings (see `stack_key`) are trained as one batch:
weights [members, in, out], one `baddbmm` per layer, activations per slice of members, and one
optimiser over the stacked tensors. Each member's loss is the mean over its own samples and the
stack minimises their sum, so every member gets exactly the gradient it would get alone; Adam and
SGD are elementwise, so each member follows the trajectory of the same run done alone.

This module takes configs and returns numbers: it writes no files and prints nothing.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from activation_bench import activations, datasets, fused
from activation_bench.data import DTYPES, Dataset, derived_seed, generator, make_dataset
from activation_bench.diagnostics import GradLog, unit_shares
from activation_bench.model import Slice, StackedMLP, member_mse, member_weights

ProgressFn = Callable[[int, int, torch.Tensor], None]  # (epochs done, epochs, [M] last losses)


DIVERGENCE_FACTOR = 1e8
CHECK_EVERY = 50
HAND_GRADIENT = True  # fused.py's hand-written gradient where every activation has one (else autograd)


@dataclass
class RunResult:
    train_loss: list[float]  # one per epoch trained (fewer than epochs if diverged)
    val_loss: list[float] | None
    status: str  # "complete" or "diverged"
    diverged_epoch: int | None  # first epoch (1-based) whose loss was NaN, inf or > 1e8 x epoch 1
    n_params: int
    wall_time_s: float  # of the whole stack this member was trained in
    stack_size: int
    device: str
    # diagnostics: (epoch, layer, weight_grad_norm, act_norm) rows with log.grad_norms, else None;
    # per hidden layer, the share of dead and of saturated units at the end (NaN: not defined)
    grads: list[tuple[int, int, float, float]] | None = None
    dead_units: list[float] | None = None
    saturated_units: list[float] | None = None
    test_loss: list[float] | None = None  # real and function tasks
    data_info: dict[str, Any] | None = None  # real and function tasks: split sizes, source, target scale


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def _act_cfg(cfg: Any) -> dict[str, Any]:
    return dict(cfg.activation)


def data_shapes(cfg: Any) -> tuple[int, int, int, int]:
    """(training rows, validation rows, test rows, input features) of a member's data."""
    d = cfg.data
    if datasets.is_real(d):
        return datasets.shapes(cfg)
    return d.n_samples, d.n_val, 0, d.input_dim


def load_data(cfg: Any) -> Dataset:
    """The member's data: real and function tasks from the per-process cache, else generated."""
    return datasets.make_dataset(cfg) if datasets.is_real(cfg.data) else make_dataset(cfg)


def stack_key(cfg: Any) -> tuple:
    """Members with equal keys can be trained in one stack."""
    n, n_val, n_test, dim = data_shapes(cfg)
    h1, h2 = activations.hidden_width(_act_cfg(cfg), cfg.model.hidden_dim)
    return (n, n_val, n_test, dim, h1, h2, cfg.model.depth, cfg.batch_size or n,
            cfg.epochs, float(cfg.lr), cfg.optimizer, cfg.dtype, resolve_device(cfg.device), _shuffles(cfg),
            _grad_every(cfg))


def _grad_every(cfg: Any) -> int | None:
    return cfg.log.every if cfg.log.grad_norms else None


def _shuffles(cfg: Any) -> bool:
    n = data_shapes(cfg)[0]
    return bool(cfg.shuffle) and (cfg.batch_size or n) < n


def member_bytes(cfg: Any) -> int:
    """A generous estimate of one member's memory in a stack (params, grads, optimiser, activations,
    per-epoch losses and the gradient-norm log), for every hidden layer of a deep member."""
    n, n_val, n_test, dim = data_shapes(cfg)
    h1, h2 = activations.hidden_width(_act_cfg(cfg), cfg.model.hidden_dim)
    depth = cfg.model.depth
    n_par = dim * h1 + h1 + (depth - 1) * (h2 * h1 + h1) + h2 + 1
    n_data = (n + n_val + n_test) * (dim + 1)
    n_act = (n + n_val + n_test) * (depth * (4 * h1 + 2 * h2) + 4)
    n_log = 2 * depth * (cfg.epochs // cfg.log.every + 2) if cfg.log.grad_norms else 0
    itemsize = 8 if cfg.dtype == "float64" else 4
    return itemsize * (5 * n_par + n_data + n_act + n_log) + itemsize * 3 * cfg.epochs


MAX_STACK = 256  # on CPU larger stacks gain no speed, and smaller ones lose less to a kill


def plan_stacks(cfgs: Sequence[Any], memory_mb: float = 1024.0, max_members: int = MAX_STACK) -> list[list[int]]:
    """Group member indices by stack key, in even chunks that stay within memory_mb each."""
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(stack_key(cfg), []).append(i)
    stacks = []
    for idx in groups.values():
        per = member_bytes(cfgs[idx[0]])
        cap = max_members if resolve_device(cfgs[idx[0]].device) == "cpu" else len(idx)  # GPUs want one launch
        size = max(1, min(cap, int(memory_mb * 2**20 // per)))
        n_chunks = -(-len(idx) // size)
        size = -(-len(idx) // n_chunks)
        stacks.extend(idx[i : i + size] for i in range(0, len(idx), size))
    return stacks


def train(cfgs: Sequence[Any], on_progress: ProgressFn | None = None) -> list[RunResult]:
    """Train members that all share one stack key, together. Returns results in input order."""
    if not cfgs:
        return []
    key = stack_key(cfgs[0])
    if any(stack_key(c) != key for c in cfgs[1:]):
        raise ValueError("members of one stack must share shapes and optimiser settings")
    n_real = len(cfgs)
    if n_real == 1:
        # A stack of one is padded with a copy of itself: with several threads, MKL's
        # single-matrix path rounds differently from its batched one, and padding makes a run
        # done alone bit-identical to the same member inside a sweep's stack.
        cfgs = [cfgs[0], cfgs[0]]
    # Denormal floats (losses near the float floor make Adam's second moments ~1e-40) are up to
    # 100x slower on CPUs; flushing them to zero changes no update measurably (eps=1e-8
    # dominates), and stacked and single runs flush alike.
    flush = torch.set_flush_denormal(True)
    try:
        return _train(cfgs, n_real, on_progress)
    finally:
        if flush:
            torch.set_flush_denormal(False)


def _train(cfgs: Sequence[Any], n_real: int, on_progress: ProgressFn | None) -> list[RunResult]:
    first = cfgs[0]
    device = resolve_device(first.device)
    dtype = DTYPES[first.dtype]
    # order members so those sharing an activation are contiguous (one module call per slice)
    act_keys = [json.dumps(_act_cfg(c), sort_keys=True) for c in cfgs]
    order = sorted(range(len(cfgs)), key=lambda i: act_keys[i])
    ordered = [cfgs[i] for i in order]
    start = time.perf_counter()

    data = [load_data(c) for c in ordered]
    n, n_val, n_test, dim = data_shapes(first)
    x = torch.stack([d.x for d in data]).to(device)
    y = torch.stack([d.y for d in data]).to(device)
    x_val = torch.stack([d.x_val for d in data]).to(device) if n_val else None
    y_val = torch.stack([d.y_val for d in data]).to(device) if n_val else None
    x_test = torch.stack([d.x_test for d in data]).to(device) if n_test else None  # type: ignore[misc]
    y_test = torch.stack([d.y_test for d in data]).to(device) if n_test else None  # type: ignore[misc]

    model = build_model(ordered, [act_keys[i] for i in order], device, dtype)
    model.train()
    opt = StackedOptimizer(list(model.parameters()), first.optimizer, float(first.lr))
    hand = fused.hand_gradient(model) if HAND_GRADIENT else None

    m, epochs = len(ordered), first.epochs
    bs = first.batch_size or n
    batches = [(x[:, i : i + bs], y[:, i : i + bs]) for i in range(0, n, bs)]
    # shuffle=true: each epoch's minibatch order is a permutation drawn from the member's own seed
    # (one stream per distinct seed), so a member sees the same batches in a stack as alone
    seeds = [c.seed for c in ordered]
    shufflers = {s: generator(s, "shuffle") for s in set(seeds)} if _shuffles(first) else {}
    train_loss = torch.full((epochs, m), float("nan"), dtype=dtype, device=device)
    val_loss = torch.full((epochs, m), float("nan"), dtype=dtype, device=device) if n_val else None
    test_loss = torch.full((epochs, m), float("nan"), dtype=dtype, device=device) if n_test else None
    diverged = torch.zeros(m, dtype=torch.bool, device=device)
    every = _grad_every(first)
    grad_log = GradLog(every, epochs, model.depth, m, dtype, device) if every else None
    diverged_at: list[int | None] = [None] * m
    done = checked = 0
    for epoch in range(epochs):
        outputs = [] if grad_log is not None and grad_log.due(epoch + 1) else None
        if len(batches) == 1:
            xb, yb = batches[0]
            train_loss[epoch] = _step(model, opt, hand, xb, yb, outputs)
            if outputs is not None:
                grad_log.add(epoch + 1, model, outputs)  # type: ignore[union-attr]
        else:
            total = torch.zeros(m, dtype=dtype, device=device)
            if shufflers:
                perms = {s: torch.randperm(n, generator=g) for s, g in shufflers.items()}
                idx = torch.stack([perms[s] for s in seeds]).to(device)[..., None]
                xs, ys = x.gather(1, idx.expand(-1, -1, x.shape[-1])), y.gather(1, idx)
                batches = [(xs[:, i : i + bs], ys[:, i : i + bs]) for i in range(0, n, bs)]
            for b, (xb, yb) in enumerate(batches):
                record = outputs if b == len(batches) - 1 else None  # the epoch's last batch is logged
                total += _step(model, opt, hand, xb, yb, record)
                if record is not None:
                    grad_log.add(epoch + 1, model, record)  # type: ignore[union-attr]
            train_loss[epoch] = total / len(batches)
        if val_loss is not None or test_loss is not None:
            model.eval()
            with torch.no_grad():
                if val_loss is not None:
                    val_loss[epoch] = member_mse(hand.predict(x_val) if hand else model(x_val), y_val)
                if test_loss is not None:
                    test_loss[epoch] = member_mse(hand.predict(x_test) if hand else model(x_test), y_test)
            model.train()
        done = epoch + 1
        # diverged: the loss is NaN or inf, or has grown DIVERGENCE_FACTOR-fold over epoch 1's
        # (Adam's bounded steps make lr=1e6 explode to ~1e27 without ever overflowing). Checked
        # every CHECK_EVERY epochs (on a GPU each check waits for the device; on a CPU it is a
        # handful of small ops per step), scanning the epochs since the last check so the epoch
        # found is still exact.
        if done % CHECK_EVERY == 0 or done == epochs:
            block = train_loss[checked:done]
            bad = ~(block <= train_loss[0] * DIVERGENCE_FACTOR) & ~diverged
            if bool(bad.any()):
                first = torch.where(bad.any(0), bad.float().argmax(0), -1).tolist()
                for i, row in enumerate(first):
                    if row >= 0:
                        diverged_at[i] = checked + row + 1
                diverged |= bad.any(0)
                if bool(diverged.all()):
                    done = max(d for d in diverged_at if d is not None)
                    break
            checked = done
        if on_progress is not None:
            on_progress(done, epochs, train_loss[epoch])
    wall = time.perf_counter() - start

    tl = train_loss[:done].T.cpu().tolist()
    vl = val_loss[:done].T.cpu().tolist() if val_loss is not None else None
    sl = test_loss[:done].T.cpu().tolist() if test_loss is not None else None
    n_params = _param_counts(model, m)
    model.eval()
    dead, saturated = (t.T.cpu().tolist() for t in unit_shares(model, x))
    stops = [diverged_at[pos] or done for pos in range(m)]
    grads = grad_log.per_member(stops) if grad_log is not None else None
    results: list[RunResult | None] = [None] * m
    for pos, original in enumerate(order):
        stop = stops[pos]
        results[original] = RunResult(
            train_loss=tl[pos][:stop],
            val_loss=vl[pos][:stop] if vl is not None else None,
            status="diverged" if diverged_at[pos] else "complete",
            diverged_epoch=diverged_at[pos],
            n_params=n_params[pos],
            wall_time_s=wall,
            stack_size=n_real,
            device=device,
            grads=grads[pos] if grads is not None else None,
            dead_units=dead[pos],
            saturated_units=saturated[pos],
            test_loss=sl[pos][:stop] if sl is not None else None,
            data_info=data[pos].info,
        )
    return results[:n_real]  # type: ignore[return-value]


def _step(model: StackedMLP, opt: StackedOptimizer, hand: fused.HandGradient | None,
          xb: torch.Tensor, yb: torch.Tensor, record: list[torch.Tensor] | None = None) -> torch.Tensor:
    """One optimiser step; returns the members' losses [M] before it. With `record`, each hidden
    layer's activation output is appended to it (the parameters' .grad stay set after the step)."""
    opt.zero_grad()
    if hand is not None:
        loss = hand.loss(xb, yb, record)  # no autograd graph; faster activation derivatives (fused.py)
    else:
        loss = member_mse(model(xb, record), yb)
        loss.sum().backward()
    opt.step()
    return loss.detach()


def build_model(ordered: Sequence[Any], keys: list[str], device: str, dtype: torch.dtype) -> StackedMLP:
    """The stacked model of these members (sharing one stack key), each initialised from its own
    seed's "init" stream under its model.init_resolved scheme."""
    first = ordered[0]
    h1, h2 = activations.hidden_width(_act_cfg(first), first.model.hidden_dim)
    depth = first.model.depth
    dim = data_shapes(first)[3]
    layers = [member_weights(c.model.init_resolved or "torch_default", dim, h1, h2, depth,
                             generator(c.seed, "init"), dtype) for c in ordered]
    ws = [torch.stack([mem[k][0] for mem in layers]).to(device) for k in range(depth)]
    bs = [torch.stack([mem[k][1][None] for mem in layers]).to(device) for k in range(depth)]
    w2 = torch.stack([mem[depth][0].T for mem in layers]).to(device)
    b2 = torch.stack([mem[depth][1][None] for mem in layers]).to(device)
    return StackedMLP(ws, bs, w2, b2, _slices(ordered, keys, depth, device, dtype))


def _slices(ordered: Sequence[Any], keys: list[str], depth: int, device: str, dtype: torch.dtype) -> list[Slice]:
    """One module per run of members sharing an activation, used by every hidden layer; where it
    has parameters or randomness, one per member and layer (a member's layers share one generator
    seeded from that member's seed, drawn from in layer order)."""
    slices: list[Slice] = []
    for i, c in enumerate(ordered):
        cfg = _act_cfg(c)
        per_member = activations.is_per_member(cfg)
        last = slices[-1] if slices else None
        if last and not per_member and not last.per_member and keys[last.start] == keys[i]:
            last.stop = i + 1
            continue
        modules = [activations.create_from_config(cfg).to(device=device, dtype=dtype)
                   for _ in range(depth if per_member else 1)]
        if hasattr(modules[0], "generator"):
            gen = torch.Generator(device=device).manual_seed(derived_seed(c.seed, "activation"))
            for module in modules:
                module.generator = gen
        slices.append(Slice(i, i + 1, modules * (depth // len(modules)), per_member))
    return slices


class StackedOptimizer:
    """Adam or SGD over the stacked tensors, the same kernels as torch.optim.Adam(fused=True).

    Written out because constructing any torch.optim optimizer imports torch._dynamo, which costs
    about 2.5 s of every process on this CPU build: more than most runs' training. Adam calls the
    fused kernel torch.optim uses (`torch._fused_adam_`, one pass over each tensor, about 3x
    faster than the foreach path here) and falls back to the foreach arithmetic where a torch
    build lacks it.
    """

    def __init__(self, params: list[torch.Tensor], kind: str, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params, self.kind, self.lr = params, kind, lr
        self.beta1, self.beta2 = betas
        self.eps, self.step_count = eps, 0
        if kind == "adam":
            self.exp_avgs = [torch.zeros_like(p) for p in params]
            self.exp_avg_sqs = [torch.zeros_like(p) for p in params]
            # one step counter shared by every tensor (fused Adam only reads it): one increment a step
            self.step_tensor = torch.zeros((), dtype=torch.float32, device=params[0].device)
            self.steps = [self.step_tensor] * len(params)
            self.fused = hasattr(torch, "_fused_adam_")

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        grads = [p.grad for p in self.params]
        if self.kind == "sgd":
            torch._foreach_add_(self.params, grads, alpha=-self.lr)
            return
        self.step_count += 1
        if self.fused:
            self.step_tensor += 1
            torch._fused_adam_(
                self.params, grads, self.exp_avgs, self.exp_avg_sqs, [], self.steps, lr=self.lr,
                beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps, amsgrad=False,
                maximize=False,
            )
            return
        bias1 = 1 - self.beta1**self.step_count
        bias2_sqrt = math.sqrt(1 - self.beta2**self.step_count)
        torch._foreach_lerp_(self.exp_avgs, grads, 1 - self.beta1)
        torch._foreach_mul_(self.exp_avg_sqs, self.beta2)
        torch._foreach_addcmul_(self.exp_avg_sqs, grads, grads, 1 - self.beta2)
        denom = torch._foreach_sqrt(self.exp_avg_sqs)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(self.params, self.exp_avgs, denom, -self.lr / bias1)


def _param_counts(model: StackedMLP, m: int) -> list[int]:
    per = sum(p[0].numel() for p in (*model.ws, *model.bs, model.w2)) + 1  # + the output bias
    counts = [per] * m
    for s in model.slices:
        extra = sum(p.numel() for mod in dict.fromkeys(s.modules) for p in mod.parameters())
        if extra:
            for i in range(s.start, s.stop):
                counts[i] += extra // (s.stop - s.start)
    return counts
