"""The training engine: trains a stack of members at once and returns their losses.

Members that share shapes and optimiser settings (see `stack_key`) are trained as one batch:
weights [members, in, out], one `baddbmm` per layer, activations per slice of members, and one
optimiser over the stacked tensors. Each member's loss (mean squared error for a regressor, mean
softmax cross-entropy for a classifier) is the mean over its own samples and the stack minimises
their sum, so every member gets exactly the gradient it would get alone; Adam and SGD are
elementwise, and dropout masks come from each member's own seed, so each member follows the
trajectory of the same run done alone.

This module takes configs and returns numbers: it writes no files and prints nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from activation_bench.data import registry as sources
from activation_bench.data.feed import Feed
from activation_bench.data.synthetic import DTYPES, Dataset
from activation_bench.engine import resume
from activation_bench.engine.activations import grouped
from activation_bench.engine.compiled import choose as compiled
from activation_bench.engine.diagnostics import GradLog
from activation_bench.engine.divergence import CHECK_EVERY, Divergence
from activation_bench.engine.losses_log import Losses
from activation_bench.engine.models import hand_gradient, registry
from activation_bench.engine.models.base import MemberLayers
from activation_bench.engine.models.losses import member_accuracy, member_cross_entropy, member_mse
from activation_bench.engine.models.slices import param_counts
from activation_bench.engine.optim import StackedOptimizer, decay_flags, member_owners
from activation_bench.engine.plan import (
    act_cfg,
    act_key,
    classifies,
    grad_every,
    logged_columns,
    planned_engine,
    resolve_device,
    stack_key,
    steps_rows,
)
from activation_bench.engine.preact import PreactLog
from activation_bench.engine.teacher import teacher_targets
from activation_bench.engine.vml import resolve_vml_kernels
from activation_bench.engine.whole_split import BestWeights, Judged, judge
from activation_bench.host import keep_freed_memory

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

ProgressFn = Callable[[int, int, torch.Tensor], None]  # (epochs done, epochs, [M] last losses)
NoticeFn = Callable[[str], None]  # one line for the user (engine=compiled|auto: which engine a stack used)


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
    # an expression's learned parameters (activation.learnable=true): name -> value per hidden layer
    learned: dict[str, list[float]] | None = None
    # classification: accuracy per epoch on the validation and test splits (fractions in [0, 1])
    val_acc: list[float] | None = None
    test_acc: list[float] | None = None
    train_eval_loss: list[float] | None = None  # log.train_eval: the training split's loss, dropout off
    # log.preact_stats: (epoch, layer, stat, value) rows, how normal each layer's pre-activations are
    preact: list[tuple[int, int, str, float]] | None = None
    engine: str = "eager"  # the engine the stack trained with: eager or compiled (compiled/choose.py)
    # the family's own facts about the built model (model=module: where the activation got in)
    model_info: dict[str, Any] | None = None
    threads: int = 0  # torch's intra-op threads while the stack trained: CPU results depend on the count
    # a test split judged whole at the end (Feed.judged_at_end, whole_split.py): per item of the split
    # (a text's window), the loss and accuracy at the epoch of lowest validation loss and at the last
    test_items: dict[str, list[float]] | None = None


def load_data(cfg: Cfg) -> Dataset:
    """The member's data, as its source loads it (data/registry.py; synthetic data's teacher is the engine's)."""
    return sources.of(cfg).load(cfg, teacher_targets)


def train(cfgs: Sequence[Cfg], on_progress: ProgressFn | None = None,
          notice: NoticeFn | None = None, checkpoints: resume.Hooks | None = None,
          store: bool = True) -> list[RunResult]:
    """Train members that all share one stack key, together. Returns results in input order.
    `notice` gets one line saying which engine the stack used where it is the compiled one or
    engine=compiled was asked for (compiled.prepare). With
    `checkpoints`, the stack resumes from its saved state and saves it when due (resume.py);
    it raises resume.Preempted where a signal asked it to stop. store=False: engine=auto does
    not look for a saved compiled step (a sweep whose other stacks trained eager)."""
    if not cfgs:
        return []
    key = stack_key(cfgs[0])
    if any(stack_key(c) != key for c in cfgs[1:]):
        raise ValueError("members of one stack must share shapes and optimiser settings")
    n_real = len(cfgs)
    engine, why = planned_engine(cfgs, store)
    keep_freed_memory()  # a step's megabyte tensors reused from the heap, not page-faulted in anew
    resolve_vml_kernels()  # before any threaded erf/exp/tanh: see vml.py
    # Denormal floats (losses near the float floor make Adam's second moments ~1e-40) are up to
    # 100x slower on CPUs; flushing them to zero changes no update measurably (eps=1e-8
    # dominates), and stacked and single runs flush alike.
    flush = torch.set_flush_denormal(True)
    try:
        if engine == "saved":  # auto: the compiled step where it is saved, else eager
            try:
                return _train(compiled.pad(cfgs, act_key), n_real, on_progress, notice, (engine, why), checkpoints)
            except compiled.NotSaved:
                engine = "eager"
        if engine == "compiled":
            cfgs = compiled.pad(cfgs, act_key)
        elif n_real == 1 and registry.of(cfgs[0]).pads_alone(cfgs[0], resolve_device(cfgs[0].device),
                                                              DTYPES[cfgs[0].dtype]):
            # A stack of one is padded with a copy of itself where its family cannot show that
            # one-matrix products round as batched ones (MKL's single-matrix path can differ with
            # several threads): a run done alone is bit-identical to the member inside a sweep's stack.
            cfgs = [cfgs[0], cfgs[0]]
        return _train(cfgs, n_real, on_progress, notice, (engine, why), checkpoints)
    finally:
        if flush:
            torch.set_flush_denormal(False)


def _train(cfgs: Sequence[Cfg], n_real: int, on_progress: ProgressFn | None,
           notice: NoticeFn | None = None, engine: tuple[str, str] = ("eager", "requested"),
           hooks: resume.Hooks | None = None) -> list[RunResult]:
    """Build the stack, train it epoch by epoch (validation and test losses after each, the
    divergence check every CHECK_EVERY epochs), and return each member's result."""
    start = time.perf_counter()
    stack = _build(cfgs)
    first = stack.ordered[0]
    stack.engine, stack.compiled_step = compiled.prepare(stack, *engine, n_real, notice)
    epochs, m = first.epochs, len(cfgs)
    losses = Losses.empty(epochs, m, logged_columns(first), stack.dtype, stack.device)
    every = grad_every(first)
    grad_log = GradLog(every, epochs, stack.model.depth, m, stack.dtype, stack.device) if every else None
    probe = int(first.log.preact_stats)
    preact = PreactLog(probe, epochs, stack.model.depth, m) if probe else None
    if preact is not None:
        preact.add(0, stack.model, stack.x)  # at initialisation
    divergence = Divergence.none(m, stack.device)
    # a test split judged at the end: each member's best-validation weights kept (whole_split.py)
    best = BestWeights(stack.model, m, stack.dtype, stack.device) if stack.feed.judged_at_end else None
    run = resume.Attempt(hooks, stack, losses, divergence, {"grads": grad_log, "preact": preact, "best": best},
                             epochs, start) if hooks is not None else None
    done = run.resume() if run is not None else 0
    for epoch in range(done, epochs):
        losses.train[epoch] = _epoch(stack, epoch, grad_log, run)
        _evaluate(stack, losses, epoch)
        if best is not None:
            best.update(stack.model, losses.val[epoch], epoch)  # type: ignore[index]
        done = epoch + 1
        if preact is not None and preact.due(done):
            preact.add(done, stack.model, stack.x)
        if done % CHECK_EVERY == 0 or done == epochs:
            stop = divergence.check(losses.train, done)
            if stop is not None:
                done = stop
                break
        if on_progress is not None:
            on_progress(done, epochs, losses.train[epoch])
        if run is not None:
            run.after_epoch(done)
    judged = judge(stack.model, stack.predict, stack.feed.judge, stack.test, best,  # type: ignore[arg-type]
                   losses.test, losses.test_acc, done) if best is not None else None
    wall = run.wall() if run is not None else time.perf_counter() - start
    return _results(stack, losses, divergence.at, done, grad_log, wall, n_real, preact, judged)


@dataclass
class _Stack:
    """A stack ready to train: its members sorted so those sharing an activation are contiguous
    (one module call per slice; `order[pos]` is the input index of the member at position pos),
    their data as its source feeds it (data/feed.py: the splits stacked [members, rows, ...] on the
    device, each epoch's batches, what is judged at the end), the model and its optimiser."""

    ordered: list[Cfg]
    order: list[int]
    data: list[Dataset]
    feed: Feed
    model: MemberLayers
    opt: StackedOptimizer
    hand: hand_gradient.HandGradient | None
    device: str
    classify: bool = False  # y holds class labels [M, N] (int64): cross-entropy and accuracy
    train_eval: bool = False  # log.train_eval: the training split's loss after each epoch, dropout off
    engine: str = "eager"  # engine=compiled|auto: the compiled step (compiled/choose.py) where it is used
    compiled_step: compiled.Compiled | None = None
    family: registry.Family = dataclasses.field(default_factory=registry.Family)  # model=NAME's

    @property
    def x(self) -> torch.Tensor:
        """The members' training inputs [M, N, ...]."""
        return self.feed.x

    @property
    def y(self) -> torch.Tensor:
        return self.feed.y

    @property
    def val(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.feed.val

    @property
    def test(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.feed.test

    @property
    def shufflers(self) -> dict[int, torch.Generator]:
        """The random streams of the batch order, one per distinct seed (a member sees the same
        batches in a stack as alone); a checkpoint saves them."""
        return self.feed.gens

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-member loss [M] of the model's output against y (a language model's logits [M, B, T, V]
        against y [M, B, T]: the mean over its B x T characters)."""
        return member_cross_entropy(out.flatten(1, -2), y.flatten(1)) if self.classify else member_mse(out, y)

    def batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """This epoch's minibatches, as the data's feed gives them."""
        return self.feed.batches()

    @property
    def dtype(self) -> torch.dtype:
        """The losses' dtype: the inputs' (a text's are characters: the model's)."""
        return self.x.dtype if self.x.is_floating_point() else next(self.model.parameters()).dtype

    @property
    def fixed_batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The minibatches in the data's own order (a compiled step is traced on them)."""
        return self.feed.fixed_batches

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """The model's outputs on x [M, rows, features] in evaluation, in chunks of the family's
        eval_rows where it sets them."""
        if self.hand:
            return self.hand.predict(x)
        chunk = self.family.eval_rows
        if chunk is not None and x.shape[1] > chunk:
            return torch.cat([self.model(part) for part in x.split(chunk, dim=1)], dim=1)
        return self.model(x)


def _build(cfgs: Sequence[Cfg]) -> _Stack:
    """Load the members' data and its feed, build the stacked model (each member initialised from its
    own seed), its hand-written gradient where it has one (models/hand_gradient.py) and the optimiser."""
    first = cfgs[0]
    device = resolve_device(first.device)
    dtype = DTYPES[first.dtype]
    act_keys = [act_key(c) for c in cfgs]
    # members sharing an activation are contiguous, and expression members (one grouped module) first
    order = sorted(range(len(cfgs)), key=lambda i: (not grouped.is_groupable(act_cfg(cfgs[i])), act_keys[i]))
    ordered = [cfgs[i] for i in order]
    source = sources.of(first)
    data = [source.load(c, teacher_targets) for c in ordered]
    feed = source.feed(first, data, [c.seed for c in ordered], device)
    family = registry.of(first)
    model = family.build(ordered, [act_keys[i] for i in order], device, dtype)
    model.train()
    return _Stack(
        ordered=ordered, order=order, data=data, feed=feed, model=model,
        opt=StackedOptimizer.from_config(list(model.parameters()), first, steps_rows(first)[0], decay_flags(model),
                                         member_owners(model)),
        hand=hand_gradient.hand_gradient(model), device=device,
        classify=classifies(first), train_eval=bool(first.log.train_eval), family=family,
    )


def _epoch(stack: _Stack, epoch: int, grad_log: GradLog | None, run: resume.Attempt | None = None) -> torch.Tensor:
    """One pass over the training set; returns the members' losses [M] (the mean over minibatches).
    Where the gradient log is due, the epoch's last batch is logged. With `run`, a checkpoint may
    be saved between steps, and a resumed epoch starts at the step it stopped at."""
    outputs: list[torch.Tensor] | None = [] if grad_log is not None and grad_log.due(epoch + 1) else None
    if run is not None:
        run.epoch_start()
    batches = stack.batches()
    if len(batches) == 1:
        xb, yb = batches[0]
        loss = _step(stack, xb, yb, outputs)
        if outputs is not None:
            _log_grads(stack, grad_log, epoch + 1, outputs)  # type: ignore[arg-type]
        return loss
    first, saved = run.start_step(epoch) if run is not None else (0, None)
    total = saved if saved is not None else torch.zeros(stack.x.shape[0], dtype=stack.dtype, device=stack.device)
    for b in range(first, len(batches)):
        xb, yb = batches[b]
        record = outputs if b == len(batches) - 1 else None
        total += _step(stack, xb, yb, record)
        if record is not None:
            _log_grads(stack, grad_log, epoch + 1, record)  # type: ignore[arg-type]
        elif run is not None and b + 1 < len(batches):
            run.after_step(epoch, b + 1, total)
    return total / len(batches)


def _log_grads(stack: _Stack, grad_log: GradLog, epoch: int, outputs: list[torch.Tensor]) -> None:
    """The gradient log of the step just taken: from the eager step's .grad and recorded outputs,
    or the norms the compiled step returned."""
    if stack.compiled_step is not None:
        grad_log.put(epoch, *stack.compiled_step.grad_norms)  # type: ignore[misc]
    else:
        grad_log.add(epoch, stack.model, outputs)


def _evaluate(stack: _Stack, losses: Losses, epoch: int) -> None:
    """After this epoch, in evaluation mode (dropout off): the validation and test losses where the
    data has those splits, a classifier's accuracies on them, and with log.train_eval the training
    split's loss."""
    if losses.val is None and losses.test is None and losses.train_eval is None:
        return
    stack.model.eval()
    with torch.no_grad():
        test = None if stack.feed.judged_at_end else stack.test  # judged once, at the end
        splits = ((stack.val, losses.val, losses.val_acc), (test, losses.test, losses.test_acc),
                  ((stack.x, stack.y), losses.train_eval, None))
        for split, out, acc in splits:
            if split is not None and out is not None and stack.compiled_step is not None:
                out[epoch], acc_now = stack.compiled_step.evaluate(*split)
                if acc is not None:
                    acc[epoch] = acc_now
            elif split is not None and out is not None:
                pred = stack.predict(split[0])
                out[epoch] = stack.loss(pred, split[1])
                if acc is not None:
                    acc[epoch] = member_accuracy(pred.flatten(1, -2), split[1].flatten(1))
    stack.model.train()


def _results(stack: _Stack, losses: Losses, diverged_at: list[int | None], done: int, grad_log: GradLog | None,
             wall: float, n_real: int, preact: PreactLog | None = None, judged: Judged | None = None
             ) -> list[RunResult]:
    """Each member's RunResult, in input order (the padding copy of a lone member dropped)."""
    m = len(stack.ordered)
    cols = losses.per_member(done)
    n_params = param_counts(stack.model, m)
    stack.model.eval()
    if stack.compiled_step is not None and stack.compiled_step.shares is not None:
        shares = stack.compiled_step.shares(stack.x, stack.y)
    else:
        shares = stack.family.unit_shares(stack.model, stack.x)
    dead, saturated = (t.T.cpu().tolist() for t in shares)
    stops = [diverged_at[pos] or done for pos in range(m)]
    grads = grad_log.per_member(stops) if grad_log is not None else None
    preacts = preact.per_member(stops) if preact is not None else None
    learned = stack.model.learned(m)
    model_info = stack.model.info()
    results: list[RunResult | None] = [None] * m
    for pos, original in enumerate(stack.order):
        stop = stops[pos]
        results[original] = RunResult(
            **{name: values[pos][:stop] if values is not None else None for name, values in cols.items()},
            status="diverged" if diverged_at[pos] else "complete",
            diverged_epoch=diverged_at[pos],
            n_params=n_params[pos],
            wall_time_s=wall,
            stack_size=n_real,
            device=stack.device,
            grads=grads[pos] if grads is not None else None,
            dead_units=dead[pos],
            saturated_units=saturated[pos],
            data_info=stack.data[pos].info,
            learned=learned[pos],
            preact=preacts[pos] if preacts is not None else None,
            engine=stack.engine,
            model_info=model_info,
            threads=torch.get_num_threads(),
            test_items=judged.member(pos) if judged is not None else None,
        )
    return results[:n_real]  # type: ignore[return-value]


def _step(stack: _Stack, xb: torch.Tensor, yb: torch.Tensor, record: list[torch.Tensor] | None = None) -> torch.Tensor:
    """One optimiser step; returns the members' losses [M] before it. With `record`, each hidden
    layer's activation output is appended to it (the parameters' .grad stay set after the step)."""
    if stack.compiled_step is not None:
        return stack.compiled_step.step(xb, yb)
    stack.opt.zero_grad()
    if stack.hand is not None:
        loss = stack.hand.loss(xb, yb, record)  # no autograd graph: models/hand_gradient.py
    else:
        loss = stack.loss(stack.model(xb, record), yb)
        loss.sum().backward()
    stack.opt.step()
    return loss.detach()
