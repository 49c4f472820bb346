"""The compiled engine (engine=compiled|auto): the whole training step compiled by inductor.

One function does a step of a whole stack: the forward, the loss (MSE for a regressor,
cross-entropy for a classifier), the hand-written gradient (the closed forms of fused.py) and the
optimiser's update (Adam written out, its per-step scalars passed in as a tensor, or SGD), and it is
compiled ahead of time by inductor (AOTInductor), which fuses the elementwise work of all of them
into a few C++ loops. It is compiled once per stack shape (the members per activation, rows per
batch, widths) and saved as a package (compile_store.py, under `cache_dir()`, beside inductor's
own caches), so the same shapes compile once per machine and later processes load the library
without tracing, or importing the compiler, again.

It covers every MLP (any depth, dropout, batch or layer norm, residual skips) and convnet,
full-batch and minibatch, regression and classification, with log.grad_norms (the step also
returns the norms) and log.preact_stats (its probe passes run the eager model on the parameters
the compiled step updates in place), and every activation (prelu's, learnable expressions' and
a user's module's parameters and the draws of rrelu and stochastic_gelu: compiled_acts.py). The
two-layer MLP without dropout, norm, gradient norms or such activations takes the step here (the
closed forms of fused.py where they exist, else torch.func.vjp of the activation); every other
MLP takes compiled_mlp.py's (the model's forward differentiated by torch.func.vjp), and a convnet
compiled_cnn.py's. Any other stack, a machine without a C++ compiler, or a compilation that fails
trains with the eager engine instead, and says so in one line: the compiled function is compiled
and run once on copies of the stack's tensors before training starts, so a failure never leaves a
half-trained stack.

Numbers: not bit-identical to the eager engine, nor a member to the same member alone (inductor's
loops round differently with the shapes); equal to the eager engine to within the tolerance that
docs/reproducibility.md states, and the same bits from process to process for the same command,
machine, torch and thread count.
"""

from __future__ import annotations

import dataclasses
import gc
import getpass
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from activation_bench.engine.activations import grouped
from activation_bench.engine.compiled import acts as compiled_acts
from activation_bench.engine.compiled import mlp as compiled_mlp
from activation_bench.engine.compiled import store as compile_store
from activation_bench.engine.models import hand_gradient as fused
from activation_bench.engine.models import registry
from activation_bench.host import keep_freed_memory

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

Notice = Callable[[str], None]
StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# engine=auto: compile where the stack's estimated eager training time is AUTO_FACTOR times the
# estimated compile cost. The eager rate is a reference model-step (64 inputs, 64 hidden, 1
# output, 10 rows) at REF_STEPS_PER_S, scaled by rows x (inputs + outputs) x hidden.
# Measured on a quiet 2-core AMD EPYC (2026-11-26, commit 17a6c93, two threads, docs/performance.md),
# with each compiled function saved as an AOTInductor package (compile_store): warm, a compiled
# process costs what an eager one does (the reference grid's 480 members at 1 epoch: 2.77 s
# against 2.58 s; loading two stacks' packages takes milliseconds and imports no compiler); cold,
# a stack costs 7-17 s for its step and 6-7 s for each evaluation shape (the reference grid: 28.5 s
# at 1 epoch; the MNIST-1D classification grid's four stacks, three graphs each: 98 s). The eager
# engine runs the reference model at 119,000 model-steps/s (the compiled one at 190,000). The rule
# charges a cold compile with margin, so it stays as it was. It does not look for saved functions on
# purpose: which engine a member trains with (and so its last bits) follows from its config and
# whether the machine can compile at all, the same on a machine whose store is warm or empty.
# A model's work is its forward's multiply-adds per sample (its family's `macs`; a convnet's
# convolutions as their im2col products) in the same units: for MNIST-1D's CNN about a third optimistic on eager's
# speed, and its cold stack costs 35-42 s (2026-11-26, commit 960c1d2), so at the threshold a cold
# compile about breaks even and a warm one wins.
COMPILE_COST_S = 30.0  # a cold compile, with margin for a busy machine
AUTO_FACTOR = 4.0
REF_STEPS_PER_S = 100_000.0
REF_WORK = 10 * (64 + 1) * 64


def cache_dir() -> str:
    """Where inductor's caches go: TORCHINDUCTOR_CACHE_DIR if set, else `inductor` in the user
    cache directory ($ACTBENCH_CACHE_DIR, else $XDG_CACHE_HOME/activation-bench, else
    ~/.cache/activation-bench). A TORCHINDUCTOR_CACHE_DIR naming inductor's own default is taken
    as unset: importing inductor sets the variable to it (for its worker processes), so a process
    that imported inductor (a benchmark's parent, a notebook) would otherwise send every child's
    compiled functions to the temporary folder, away from the saved ones."""
    from activation_bench.data.generated import cache_dir as user_cache

    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if given and os.path.abspath(given) != _inductor_default():
        return given
    return str(user_cache() / "inductor")


def _inductor_default() -> str:
    """torch._inductor.runtime.cache_dir_utils.default_cache_dir(), written out: importing it would
    import inductor (a second, and what a process loading saved packages avoids)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def work_s(members: int, steps: int, macs: int) -> float:
    """The eager engine's estimated training time of a stack whose model-step's forward takes `macs`
    multiply-adds, at the reference model's rate (REF_WORK multiply-adds at REF_STEPS_PER_S)."""
    return members * steps * max(macs / REF_WORK, 0.25) / REF_STEPS_PER_S


def choose(requested: str, eager_s: float) -> tuple[str, str]:
    """(engine to try, why) for a stack whose eager training is estimated at eager_s seconds."""
    if requested != "auto":
        return requested, "requested"
    threshold = AUTO_FACTOR * COMPILE_COST_S
    if eager_s >= threshold:
        return "compiled", f"auto: estimated eager time {eager_s:.0f} s >= {threshold:.0f} s"
    return "eager", f"auto: estimated eager time {eager_s:.1f} s < {threshold:.0f} s"


def _rule(module: torch.nn.Module) -> fused.Rule:
    """The activation's forward and backward inside the compiled step: the closed form of fused.py
    where it has one, else torch.func.vjp of its forward (expressions, gated units, the rest)."""
    if type(module) is torch.nn.Tanh:  # compiled_mlp.form's: 1.7x torch's tanh in inductor
        def tanh(h: torch.Tensor) -> tuple[torch.Tensor, fused.Backward]:
            a = compiled_mlp.tanh(h)
            return a, lambda g: g * (1.0 - a * a)
        return tanh
    closed = fused._closed_form(module)
    if closed is not None:
        return closed
    forward = grouped.functional(module)

    def rule(h: torch.Tensor) -> tuple[torch.Tensor, fused.Backward]:
        a, back = torch.func.vjp(forward, h)
        return a, lambda g: back(g)[0]
    return rule


def compiler_missing() -> str | None:
    """Why inductor could not build C++ here, or None (it needs a C++ compiler at run time)."""
    cxx = os.environ.get("CXX") or "c++"
    if shutil.which(cxx) is None and shutil.which("g++") is None:
        return f"no C++ compiler found ({cxx})"
    return None


def _step_function(rules: list[fused.Rule], sizes: list[int], n_out: int, kind: str,
                   betas: tuple[float, float], eps: float) -> Callable[..., torch.Tensor]:
    """The pure step: (params, exp_avgs, exp_avg_sqs, scale, x, y) -> per-member loss [M] before
    the update, updating params and the optimiser's state in place. `scale` holds the step's
    scalars (Adam: lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t); SGD: lr), computed per step outside
    the graph: as a tensor it neither specialises the graph (one graph serves every lr and step)
    nor is recomputed inside every iteration of the update loops (inductor inlines scalar
    arithmetic such as beta^t into each consumer's loop, which made the update 3x slower)."""

    def step(params: list[torch.Tensor], exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
             scale: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        w1, b1, w2, b2 = params
        a, backs = fused.rules_forward(rules, torch.baddbmm(b1, x, w1), sizes)
        rows = x.shape[1]
        if n_out == 1:
            loss, g_w2, g_b2, g_a = fused.mse_head(a, w2, b2, y)
            g_b2 = torch.nn.functional.pad(g_b2, (0, b2.shape[-1] - 1))
        else:
            logp = torch.baddbmm(b2, a, w2)[..., :n_out].log_softmax(dim=-1)
            loss = logp.gather(-1, y[..., None]).squeeze(-1).neg().mean(dim=1)
            g_logits = (logp.exp() - torch.nn.functional.one_hot(y, n_out).to(logp.dtype)) / rows
            g_logits = torch.nn.functional.pad(g_logits, (0, b2.shape[-1] - n_out))
            g_w2 = torch.bmm(a.transpose(1, 2), g_logits)
            g_b2 = g_logits.sum(dim=1, keepdim=True)
            g_a = torch.bmm(g_logits, w2.transpose(1, 2))
        g_h = fused.rules_backward(backs, g_a, sizes)
        grads = [torch.bmm(x.transpose(1, 2), g_h), g_h.sum(dim=1, keepdim=True), g_w2, g_b2]
        if kind == "sgd":
            for p, g in zip(params, grads):
                p.sub_(g * scale[0])
            return loss
        compiled_mlp.adam(params, grads, exp_avgs, exp_avg_sqs, scale, betas, eps)
        return loss

    return step


def _steady_malloc() -> None:
    """Keep freed buffers in the heap. The compiled step allocates its buffers afresh each call
    (megabytes for a stack's weight gradient), and glibc gave such blocks back to the system and
    mapped them again on the next call: one 3000-epoch sweep took 3.1 million page faults and 7.2 s
    of system time (27.7 s against 19.6 s for the same sweep without them). With fixed thresholds:
    0.22 million and 1.7 s, run after run."""
    keep_freed_memory(32 << 20, 512 << 20)


def _configure() -> None:
    """Steady malloc, and inductor's caches (and the compile store) in the user cache directory."""
    _steady_malloc()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir()


def _compile(fn: Callable[..., Any], role: str, config: dict[str, Any]) -> compile_store.Shapes:
    """The step or evaluation compiled per batch shape (a seam the tests replace to simulate a failure)."""
    _configure()
    return compile_store.Shapes(fn, role, config, cache_dir())


def _identity(stack: Any, sizes: list[int]) -> dict[str, Any]:
    """What shapes a stack's compiled code beside its tensors' shapes: every member's activation (in
    stack order), the model's settings, the optimiser's constants, the source of a user's module
    (compile_store.identity)."""
    model, opt, first = stack.model, stack.opt, stack.ordered[0]
    return {"activations": [c.activation for c in stack.ordered], "sizes": sizes, "n_out": model.n_out,
            "model": {k: v for k, v in first.model.items() if not k.startswith("init")},
            "optimizer": [opt.kind, opt.beta1, opt.beta2, opt.eps], "classify": stack.classify,
            "plain": impl_of(stack).plain(model), "grad_norms": bool(first.log.grad_norms),
            "code": compiled_acts.code(model)}


def impl_of(stack: Any) -> Any:
    """The module of the stack's family's compiled step (compiled/mlp.py, compiled/cnn.py)."""
    impl = stack.family.compiled()
    if impl is None:
        raise ValueError(f"model={stack.family.name} has no compiled step")
    return impl


@dataclass
class Compiled:
    """A stack's compiled functions: `step(xb, yb)` trains on a batch and returns the members'
    losses before it; `evaluate(x, y)` gives their loss and accuracy [M] in evaluation mode
    (accuracy zeros for a regressor); a convnet's `shares(x, y)` its dead and saturated unit
    shares [depth, M] (diagnostics.unit_shares; None: the eager pass)."""

    step: StepFn
    evaluate: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    shares: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    # log.grad_norms: the last step's weight-gradient and activation-output norms, [depth, M] each
    grad_norms: list[torch.Tensor] | None = None


def build(stack: Any, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> Compiled:
    """The compiled step and evaluation of this stack, compiled and run once on copies of its tensors
    for every distinct batch and split shape (raises on any failure, before the stack trains)."""
    model, opt = stack.model, stack.opt
    sizes, acts = [s.stop - s.start for s in model.slices], compiled_mlp.acts_of(model)
    impl = impl_of(stack)
    adam = opt.kind == "adam"
    own = any(s.per_member for s in model.slices)  # modules of each member's own (compiled_acts)
    runs = None
    if own:  # activations with learned parameters or rrelu's draws, per run of members
        if not compiled_acts.covered(model):
            raise ValueError("a user's module with buffers or a generator (state the compiled step does not carry)")
        mine = {id(p) for s in model.slices if s.per_member for mod in s.modules for p in mod.parameters()}
        keep = [i for i, p in enumerate(opt.params) if id(p) not in mine]
        runs = compiled_acts.runs(model, opt, acts, len(keep))
        acts, sizes = runs.acts, runs.sizes
        lay = dataclasses.replace(impl.layout(model, [opt.params[i] for i in keep]), act=runs.index, noise=runs.noise)
        params = [opt.params[i].detach() for i in keep] + runs.params
        m = [opt.exp_avgs[i] for i in keep] + runs.exp_avgs if adam else []
        v = [opt.exp_avg_sqs[i] for i in keep] + runs.exp_avg_sqs if adam else []
    else:
        lay = impl.layout(model, opt.params)
        params = [p.detach() for p in opt.params]
        m = list(opt.exp_avgs) if adam else []
        v = list(opt.exp_avg_sqs) if adam else []
    # evaluation mode: no draws (a random activation's mean)
    eval_acts, eval_lay = (runs.eval_acts, dataclasses.replace(lay, noise=())) if runs else (acts, lay)

    def noise(xb: torch.Tensor, draw: bool = True) -> list[torch.Tensor]:
        if runs is None or not runs.draws:
            return []
        return compiled_acts.draws(runs, model, xb, draw)

    config = _identity(stack, sizes)
    norms = bool(stack.ordered[0].log.grad_norms)
    plain, betas = impl.plain(model) and not norms and not own, (opt.beta1, opt.beta2)
    if plain:
        step_fn = _step_function([_rule(s.module) for s in model.slices], sizes, model.n_out, opt.kind, betas, opt.eps)
    else:  # the hand-written step takes neither gradient norms nor per-member activations
        step_fn = impl.step_function(acts, sizes, lay, model, opt.kind, betas, opt.eps, norms)
    fn = _compile(step_fn, "step", config)
    # evaluation compiled too: eager, its elementwise passes (the activations of every hidden layer
    # and a classifier's log_softmax and gather over validation and test rows) cost about a fifth
    # of a classification epoch
    evaluate = _compile(impl.eval_function(eval_acts, sizes, eval_lay, model, stack.classify), "evaluate", config)
    running = compiled_mlp.running_of(model)
    scale = torch.zeros(2, dtype=params[0].dtype, device=params[0].device)
    seen = set()
    for xb, yb in batches:  # compile (and check) every shape before anything trains
        if (xb.shape, yb.shape) in seen:
            continue
        seen.add((xb.shape, yb.shape))
        copies = [[t.clone() for t in group] for group in (params, m, v, running)]
        # masks of ones, not drawn: the members' dropout streams must not advance before training
        ones = [torch.ones_like(t) for t in impl.masks(model, xb, draw=False)] + noise(xb, draw=False)
        fn.check(*copies[:3], *(() if plain else (copies[3], ones)), _scale(opt, 1, scale.clone()), xb, yb)
    splits = [s for s in (stack.val, stack.test, (stack.x, stack.y) if stack.train_eval else None) if s is not None]
    with torch.no_grad():  # as train._evaluate calls it (grad mode is one of the graph's guards)
        parts = [p for split in splits for p in impl.parts(model, *split)]
        for xp, yp in {(xp.shape, yp.shape): (xp, yp) for xp, yp in parts}.values():  # each shape once
            evaluate.check(params, running, xp, yp)

    last: list[torch.Tensor] | None = [] if norms else None

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        if adam:
            opt.step_count += 1
        extra = () if plain else (running, impl.masks(model, xb) + noise(xb))
        out = fn(params, m, v, *extra, _scale(opt, opt.step_count, scale), xb, yb)
        if last is None:
            return out
        last[:] = out[1:]
        return out[0]

    run_eval = impl.evaluation(evaluate, params, running, model, stack.classify)
    if impl.shares_function is None:
        return Compiled(step, run_eval, grad_norms=last)
    # a convnet's unit shares compiled too: eager, they cost a third of a one-epoch stack
    shares = _compile(impl.shares_function(eval_acts, sizes, eval_lay, model), "shares", config)
    with torch.no_grad():  # its parts share one shape
        shares.check(params, running, *impl.parts(model, stack.x, stack.y)[0])
    return Compiled(step, run_eval, impl.unit_shares(shares, params, running, model), last)


def _scale(opt: Any, t: int, out: torch.Tensor) -> torch.Tensor:
    """The step's scalars into `out`, in float64 arithmetic as the eager foreach Adam: Adam's step
    size lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t) at step t (compiled_mlp.adam); SGD's lr."""
    if opt.kind == "sgd":
        out[0] = float(opt.lr)
        return out
    out[0] = float(opt.lr) / (1.0 - opt.beta1**t)
    out[1] = 1.0 / math.sqrt(1.0 - opt.beta2**t)
    return out


def plan(first: Cfg, members: int, steps: int, rows: int) -> tuple[str, str]:
    """(engine, why) for a stack of `members` before it is built: the requested engine, `auto`
    resolved by the estimate, and eager where no C++ compiler is found."""
    requested = first.get("engine") or "eager"
    if requested == "eager":
        return "eager", "requested"
    family = registry.of(first)
    if family.compiled() is None:
        return "eager", _fallback(f"model={family.name} has no compiled step")
    if (optimizer := optimizer_settings(first)):
        return "eager", _fallback(f"its step has plain Adam and SGD only, not {optimizer}")
    engine, why = choose(requested, work_s(members, steps, max(rows, 1) * family.macs(first)))
    if engine == "compiled" and (why_not := compiler_missing()) is not None:
        return "eager", _fallback(why_not)
    return engine, why


# the optimiser settings the compiled step does not implement, at the values it does (eager: engine/optim.py)
EAGER_ONLY = {"weight_decay": 0.0, "beta2": 0.999, "momentum": 0.0, "nesterov": False, "grad_clip": 0.0,
              "schedule": "constant", "warmup_steps": 0, "decay_steps": None, "min_lr": 0.0}


def optimizer_settings(cfg: Cfg) -> str:
    """The config's optimiser settings the compiled step lacks, as `key=value, ...` ("" where none)."""
    return ", ".join(f"{k}={cfg.get(k, v)}" for k, v in EAGER_ONLY.items() if cfg.get(k, v) != v)


def padded_size(n: int) -> int:
    """The members an activation's slice is padded to: n itself up to 16 (at least 2); above, the
    next multiple of an eighth of the power of two below n (18, 20, ..., 32, 36, ..., 64, 72, ...):
    eight shapes per doubling serve every sweep size (each distinct shape is a compile) for at most
    an eighth more members' work, none for the usual seed counts (10, 20, 30, 40, 64).
    Two shapes per doubling (powers of two and 1.5 times them) padded the benchmarks' 30 seeds to
    32 and 50 to 64: 7% and 28% of the work spent on copies."""
    if n <= 8:
        return max(n, 2)
    step = 1 << max((n - 1).bit_length() - 4, 0)
    return -(-n // step) * step


def pad(cfgs: Sequence[Cfg], key: Callable[[Cfg], str]) -> list[Cfg]:
    """The members, then copies of each activation's first member (by `key`) up to padded_size:
    the copies train along and are dropped from the results (train.py keeps the first len(cfgs))."""
    groups: dict[str, list[Cfg]] = {}
    for c in cfgs:
        groups.setdefault(key(c), []).append(c)
    extra = [g[0] for g in groups.values() for _ in range(padded_size(len(g)) - len(g))]
    return [*cfgs, *extra]


def _fallback(why_not: str) -> str:
    return f"compiled engine not used: {why_not}; falling back to eager"


def prepare(stack: Any, engine: str, why: str, n_real: int, notice: Notice | None) -> tuple[str, Compiled | None]:
    """The engine this stack trains with ("eager" or "compiled", as plan() chose it) and, for
    compiled, its step. With engine=compiled|auto one line says which engine the stack uses and
    why (through `notice`); a compiled engine that cannot be used gives the eager one, never an
    error."""
    first = stack.ordered[0]
    if (first.get("engine") or "eager") == "eager":
        return "eager", None
    step = None
    if engine == "compiled":
        # the cyclic collector paused while compiling or loading: importing dynamo and inductor
        # (200,000 more tracked objects) set it off 540 times, 0.37-0.39 s of a first stack's 2.1 s
        # (2026-11-26, one thread); paused, a loaded stack leaves about 6,000 cyclic objects and a
        # cold compile 250,000 (RSS +27 MB), collected once it runs again
        enabled = gc.isenabled()
        gc.disable()
        try:
            step = build(stack, stack.fixed_batches)
        except Exception as e:  # noqa: BLE001 - any failure of compilation falls back to eager
            text = (str(e).strip().splitlines() or [""])[0][:160]
            engine, why = "eager", _fallback(f"compilation failed ({type(e).__name__}: {text})")
        finally:
            if enabled:
                gc.enable()
    if notice is not None:
        notice(f"engine {engine} for a stack of {n_real} member{'s' if n_real != 1 else ''} ({why})")
    return engine, step
