"""Building a stack's compiled functions (engine=compiled|auto, as choose.py decides): the step of
a whole stack (forward, loss, gradient and the optimiser's update: the family's step, or plain.py's
for the plain depth-1 MLP) and its evaluation, each compiled ahead of time by inductor (AOTInductor),
which fuses the elementwise work into a few C++ loops. A function is compiled once per stack shape
(the members per activation, rows per batch, widths) and saved as a package (store.py, under
`cache_dir()`, beside inductor's own caches), so the same shapes compile once per machine and later
processes load the library without tracing, or importing the compiler, again. Each function is
compiled and run once on copies of the stack's tensors before training starts, so a failure never
leaves a half-trained stack.
"""

from __future__ import annotations

import dataclasses
import getpass
import math
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from activation_bench.engine.compiled import acts as compiled_acts
from activation_bench.engine.compiled import mlp as compiled_mlp
from activation_bench.engine.compiled import plain as plain_step
from activation_bench.engine.compiled import store as compile_store

StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cache_dir() -> str:
    """Where inductor's caches go: TORCHINDUCTOR_CACHE_DIR if set, else `inductor` in the user
    cache directory ($ACTBENCH_CACHE_DIR, else $XDG_CACHE_HOME/activation-bench, else
    ~/.cache/activation-bench). A TORCHINDUCTOR_CACHE_DIR naming inductor's own default is taken
    as unset: importing inductor sets the variable to it (for its worker processes), so a process
    that imported inductor (a benchmark's parent, a notebook) would otherwise send every child's
    compiled functions to the temporary folder, away from the saved ones."""
    from activation_bench.data.cache import cache_dir as user_cache

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


def _configure() -> None:
    """Inductor's caches (and the compile store) in the user cache directory (glibc keeps freed
    buffers: train.train sets host.keep_freed_memory)."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir()


def _compile(fn: Callable[..., Any], role: str, config: dict[str, Any],
             notice: Callable[[str], None] | None = None, saved_only: bool = False) -> compile_store.Shapes:
    """The step or evaluation compiled per batch shape (a seam the tests replace to simulate a
    failure); `notice` gets a line as each cold compilation starts and ends; saved_only: loaded
    from the store or NotSaved, never compiled."""
    _configure()
    return compile_store.Shapes(fn, role, config, cache_dir(), notice, saved_only)


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


def build(stack: Any, batches: list[tuple[torch.Tensor, torch.Tensor]],
          notice: Callable[[str], None] | None = None, saved_only: bool = False) -> Compiled:
    """The compiled step and evaluation of this stack, compiled and run once on copies of its tensors
    for every distinct batch and split shape (raises on any failure, before the stack trains); each
    compilation (not a package loaded from the store) said through `notice` as it starts and ends.
    saved_only: every function loaded from the store, else compile_store.NotSaved (nothing compiled)."""
    model, opt = stack.model, stack.opt
    sizes, acts = [s.stop - s.start for s in model.slices], compiled_mlp.acts_of(model)
    impl = impl_of(stack)
    own = any(s.per_member for s in model.slices)  # modules of each member's own (compiled_acts)
    runs, lay, params, m, v = _state(model, opt, impl, acts) if own else (None, *_plain_state(model, opt, impl))
    if runs is not None:
        acts, sizes = runs.acts, runs.sizes
    adam = opt.kind == "adam"
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
        step_fn = plain_step.step_function([plain_step.rule(s.module) for s in model.slices], sizes, model.n_out,
                                           opt.kind, betas, opt.eps)
    else:  # the hand-written step takes neither gradient norms nor per-member activations
        step_fn = impl.step_function(acts, sizes, lay, model, opt.kind, betas, opt.eps, norms)
    fn = _compile(step_fn, "step", config, notice, saved_only)
    # evaluation compiled too: eager, its elementwise passes (the activations of every hidden layer
    # and a classifier's log_softmax and gather over validation and test rows) cost about a fifth
    # of a classification epoch
    evaluate = _compile(impl.eval_function(eval_acts, sizes, eval_lay, model, stack.classify), "evaluate", config,
                        notice, saved_only)
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
    shares = _compile(impl.shares_function(eval_acts, sizes, eval_lay, model), "shares", config, notice, saved_only)
    with torch.no_grad():  # its parts share one shape
        shares.check(params, running, *impl.parts(model, stack.x, stack.y)[0])
    return Compiled(step, run_eval, impl.unit_shares(shares, params, running, model), last)


State = tuple[Any, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]  # layout, params, exp_avgs, exp_avg_sqs


def _plain_state(model: Any, opt: Any, impl: Any) -> State:
    """The layout of the optimiser's parameters, and the tensors the step updates in place."""
    adam = opt.kind == "adam"
    return (impl.layout(model, opt.params), [p.detach() for p in opt.params],
            list(opt.exp_avgs) if adam else [], list(opt.exp_avg_sqs) if adam else [])


def _state(model: Any, opt: Any, impl: Any, acts: list[Any]) -> tuple[Any, ...]:
    """_plain_state where activations carry learned parameters or rrelu's draws, per run of members:
    their parameters stacked per run (compiled_acts.runs) after the model's own."""
    if not compiled_acts.covered(model):
        raise ValueError("a user's module with buffers or a generator (state the compiled step does not carry)")
    adam = opt.kind == "adam"
    mine = {id(p) for s in model.slices if s.per_member for mod in s.modules for p in mod.parameters()}
    keep = [i for i, p in enumerate(opt.params) if id(p) not in mine]
    runs = compiled_acts.runs(model, opt, acts, len(keep))
    lay = dataclasses.replace(impl.layout(model, [opt.params[i] for i in keep]), act=runs.index, noise=runs.noise)
    params = [opt.params[i].detach() for i in keep] + runs.params
    m = [opt.exp_avgs[i] for i in keep] + runs.exp_avgs if adam else []
    v = [opt.exp_avg_sqs[i] for i in keep] + runs.exp_avg_sqs if adam else []
    return runs, lay, params, m, v


def _scale(opt: Any, t: int, out: torch.Tensor) -> torch.Tensor:
    """The step's scalars into `out`, in float64 arithmetic as the eager foreach Adam: Adam's step
    size lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t) at step t (compiled_mlp.adam); SGD's lr."""
    if opt.kind == "sgd":
        out[0] = float(opt.lr)
        return out
    out[0] = float(opt.lr) / (1.0 - opt.beta1**t)
    out[1] = 1.0 / math.sqrt(1.0 - opt.beta2**t)
    return out
