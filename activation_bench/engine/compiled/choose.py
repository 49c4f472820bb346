"""The compiled engine (engine=compiled|auto): which engine a stack trains with, decided before it
is built from its config and, for auto, from what the compile store holds, and preparing it
(build.py compiles the step, or loads it).

It covers every MLP (any depth, dropout, batch or layer norm, residual skips) and convnet,
full-batch and minibatch, regression and classification, with log.grad_norms (the step also
returns the norms) and log.preact_stats (its probe passes run the eager model on the parameters
the compiled step updates in place), and every activation (prelu's, learnable expressions' and
a user's module's parameters and the draws of rrelu and stochastic_gelu: acts.py): the plain
depth-1 MLP takes plain.py's hand-written step, every other model its family's (a family whose
`compiled()` is None, as the transformer's, trains eager). A family without a compiled step, the
optimiser settings only the eager optimiser has, a machine without a C++ compiler, or a
compilation that fails trains with the eager engine instead, and says so in one line.

Numbers: not bit-identical to the eager engine, nor a member to the same member alone (inductor's
loops round differently with the shapes); equal to the eager engine to within the tolerance that
docs/reproducibility.md states, and the same bits from process to process for the same command,
machine, torch and thread count.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from activation_bench.engine.compiled import store as compile_store
from activation_bench.engine.compiled.build import Compiled, build, cache_dir
from activation_bench.engine.compiled.store import NotSaved
from activation_bench.engine.models import registry

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

Notice = Callable[[str], None]

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
# charges a cold compile with margin. Below it, auto (the default since #68) loads the stack's step
# where the store has it saved, so once a machine compiled a shape, the command without flags
# trains at the compiled engine's speed; which engine ran is recorded (config.yaml, summary.json),
# and ACTBENCH_AUTO_STORE=off leaves the store out (the engine then follows from the config alone).
# A model's work is its forward's multiply-adds per sample (its family's `macs`; a convnet's
# convolutions as their im2col products) in the same units: for MNIST-1D's CNN about a third optimistic on eager's
# speed, and its cold stack costs 35-42 s (2026-11-26, commit 960c1d2), so at the threshold a cold
# compile about breaks even and a warm one wins.
COMPILE_COST_S = 30.0  # a cold compile, with margin for a busy machine
AUTO_FACTOR = 4.0
REF_STEPS_PER_S = 100_000.0
REF_WORK = 10 * (64 + 1) * 64


def work_s(members: int, steps: int, macs: int) -> float:
    """The eager engine's estimated training time of a stack whose model-step's forward takes `macs`
    multiply-adds, at the reference model's rate (REF_WORK multiply-adds at REF_STEPS_PER_S)."""
    return members * steps * max(macs / REF_WORK, 0.25) / REF_STEPS_PER_S


def choose(requested: str, eager_s: float, store: bool = True) -> tuple[str, str]:
    """(engine to try, why) for a stack whose eager training is estimated at eager_s seconds:
    auto compiles where eager_s is AUTO_FACTOR times a cold compile's cost, and below that takes
    the compiled step only where this machine has it saved ("saved": prepare() then loads it, or
    trains eager where it is not saved); with store=False (this sweep's stacks train eager) not."""
    if requested != "auto":
        return requested, "requested"
    threshold = AUTO_FACTOR * COMPILE_COST_S
    if eager_s >= threshold:
        return "compiled", f"auto: estimated eager time {eager_s:.0f} s >= {threshold:.0f} s"
    return saved_or_eager(store), f"auto: estimated eager time {eager_s:.1f} s < {threshold:.0f} s"


def saved_or_eager(store: bool = True) -> str:
    """auto's engine for a stack it does not compile: "saved" (load the step, eager where it is not
    saved) where it may look in the store and the store holds anything, else "eager"."""
    return "saved" if store and store_consulted() and any_saved() else "eager"


def any_saved() -> bool:
    """Whether the compile store holds any package at all: where it holds none (a machine that never
    compiled), auto trains eager without building the padded stack to look its step up (about
    0.1 s a 240-member stack of the reference grid)."""
    try:
        with os.scandir(compile_store.folder(cache_dir())) as entries:
            return any(e.name.endswith(".pt2") and not e.name.startswith(".") for e in entries)
    except OSError:
        return False


def store_consulted() -> bool:
    """Whether engine=auto looks for a stack's compiled step saved on this machine (yes, unless
    ACTBENCH_AUTO_STORE=off: then auto decides by the estimate alone, the same on a machine whose
    store is warm or empty; the tests set it, so that no test's engine depends on which tests ran
    before it in the same process)."""
    return os.environ.get("ACTBENCH_AUTO_STORE", "on").strip().lower() not in ("off", "0", "false", "no")


def compiler_missing() -> str | None:
    """Why inductor could not build C++ here, or None (it needs a C++ compiler at run time)."""
    cxx = os.environ.get("CXX") or "c++"
    if shutil.which(cxx) is None and shutil.which("g++") is None:
        return f"no C++ compiler found ({cxx})"
    return None


def plan(first: Cfg, members: int, steps: int, rows: int, store: bool = True) -> tuple[str, str]:
    """(engine, why) for a stack of `members` before it is built: the requested engine, `auto`
    resolved by the estimate (and "saved": the compiled step where this machine has it saved), and
    eager where the family or the optimiser settings have no compiled step or no C++ compiler is
    found (engine=compiled says so: `fallback` in the reason)."""
    requested = first.engine
    if requested == "eager":
        return "eager", "requested"
    family = registry.of(first)
    why_not = ""
    if family.compiled() is None:
        why_not = f"model={family.name} has no compiled step"
    elif (optimizer := optimizer_settings(first)):
        why_not = f"its step has plain Adam and SGD only, not {optimizer}"
    if why_not:
        return "eager", _fallback(why_not) if requested == "compiled" else f"auto: {why_not}"
    engine, why = choose(requested, work_s(members, steps, max(rows, 1) * family.macs(first)), store)
    if engine == "compiled" and (missing := compiler_missing()) is not None:
        if requested == "compiled":
            return "eager", _fallback(missing)
        engine, why = saved_or_eager(store), f"{why}; {missing}"
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
    compiled, its step. One line through `notice` says which engine the stack uses and why, where
    it is the compiled one or engine=compiled was asked for; engine=auto training eager says
    nothing (config.yaml and summary.json record the engine). A compiled engine that cannot be
    used gives the eager one, never an error. With engine "saved" (auto below its threshold) the
    step is loaded where this machine has it saved, and store.NotSaved raised before anything
    trains where it has not (train.py then trains the stack eager, unpadded)."""
    first = stack.ordered[0]
    if first.engine == "eager":
        return "eager", None
    step = None
    if engine in ("compiled", "saved"):
        # the cyclic collector paused while compiling or loading: importing dynamo and inductor
        # (200,000 more tracked objects) set it off 540 times, 0.37-0.39 s of a first stack's 2.1 s
        # (2026-11-26, one thread); paused, a loaded stack leaves about 6,000 cyclic objects and a
        # cold compile 250,000 (RSS +27 MB), collected once it runs again
        enabled = gc.isenabled()
        gc.disable()
        try:
            step = build(stack, stack.fixed_batches, notice, saved_only=engine == "saved")
            if engine == "saved":
                engine, why = "compiled", "auto: its compiled step is saved on this machine"
        except NotSaved:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of compilation falls back to eager
            text = (str(e).strip().splitlines() or [""])[0][:160]
            engine, why = "eager", _fallback(f"compilation failed ({type(e).__name__}: {text})")
        finally:
            if enabled:
                gc.enable()
    if notice is not None and (engine == "compiled" or first.engine == "compiled"):
        notice(f"engine {engine} for a stack of {n_real} member{'s' if n_real != 1 else ''} ({why})")
    return engine, step
