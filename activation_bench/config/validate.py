"""Range checks of a composed config beyond the schema's types: one clear line (UsageError) per
problem, before anything is written. Also derives model.init_resolved (the scheme that runs)."""

from __future__ import annotations

import math
from typing import Any

from activation_bench.cfg import Cfg
from activation_bench.config.schema import DEVICES, DISTRIBUTIONS, DTYPES, ENGINES, OPTIMIZERS, SCHEDULES, TARGETS
from activation_bench.errors import check

MAX_SEED = 2**63 - 1  # every table (pandas, results.csv read back) holds a seed as a 64-bit integer


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(cfg: Cfg, where: str = "") -> None:
    """Range checks beyond the schema's types; raises UsageError with one clear line.

    Of the config, only `check_seed` reads the seed: the rest is a function of the config without
    it, which compose_many relies on to validate members differing in their seed alone once."""
    d = cfg.data
    check(cfg.epochs >= 1, f"epochs must be a positive integer, got {cfg.epochs}", where)
    check(_finite(cfg.lr) and cfg.lr > 0, f"lr must be a positive number, got {cfg.lr}", where)
    check_seed(cfg, where)
    check(cfg.optimizer in OPTIMIZERS, f"unknown optimizer '{cfg.optimizer}'; valid: {', '.join(OPTIMIZERS)}", where)
    _validate_optimizer(cfg, where)
    check(cfg.dtype in DTYPES, f"unknown dtype '{cfg.dtype}'; valid: {', '.join(DTYPES)}", where)
    check(cfg.device in DEVICES, f"unknown device '{cfg.device}'; valid: {', '.join(DEVICES)}", where)
    engine = cfg.get("engine", "eager")
    check(engine in ENGINES, f"unknown engine '{engine}'; valid: {', '.join(ENGINES)}", where)
    check(cfg.log.every >= 1, f"log.every must be a positive integer, got {cfg.log.every}", where)
    ck = cfg.get("checkpoint") or {}
    secs, every = ck.get("seconds", 300.0), ck.get("every", 0)
    check(_finite(secs) and secs >= 0, f"checkpoint.seconds must be >= 0 (0: not by time), got {secs}", where)
    check(every >= 0, f"checkpoint.every must be >= 0 (0: not by epochs), got {every}", where)
    k = cfg.log.preact_stats
    check(k >= 0, f"log.preact_stats must be >= 0 (0: off; K: every K epochs), got {k}", where)
    from activation_bench.data import tables
    from activation_bench.engine.models import registry

    name = str(cfg.model.get("name") or "mlp")
    check(name in registry.names(), f"unknown model '{name}'; valid: {', '.join(registry.names())}", where)
    family = registry.family(name)

    from activation_bench.data import text, text_checks

    names = (*DISTRIBUTIONS, *tables.REAL, *text.TEXT)
    check(d.name in names, f"unknown data '{d.name}'; valid: {', '.join(sorted(names))}", where)
    tables.check_task(d, where)
    check(_finite(d.noise) and d.noise >= 0, f"data.noise must be >= 0, got {d.noise}", where)
    if d.name in text.TEXT:
        text_checks.validate(cfg, where)
        check(cfg.batch_size is not None, f"data={d.name} is text, trained on random windows: set batch_size "
              "(windows per member and step), e.g. batch_size=12", where)
    elif d.name in tables.REAL:
        check(d.n_val == 0, f"data.n_val does not apply to data={d.name}; use data.val_fraction", where)
        tables.validate(cfg, where)
    else:
        _validate_synthetic(cfg, where)
    from activation_bench.data import shapes
    from activation_bench.engine.activations import registry as activations

    shapes.check_channels(cfg, where)
    shapes.resolve_sizes(cfg, where)  # ${data:NAME} (e.g. +model.kwargs.num_classes=${data:classes})
    activations.check_config(cfg.activation, where, cfg.dtype)
    family.validate(cfg, where)
    if d.name in DISTRIBUTIONS and d.target == "teacher":
        activations.check_config({"name": d.teacher_activation}, where)


def check_seed(cfg: Cfg, where: str = "") -> None:
    """The seed's own checks (part of `validate`): a non-negative 64-bit integer."""
    check(cfg.seed >= 0, f"seed must be >= 0, got {cfg.seed}", where)
    check(cfg.seed <= MAX_SEED, f"seed must be at most 2**63-1 = {MAX_SEED} (a 64-bit integer, as tables store "
          f"it), got {cfg.seed}", where)


def _validate_optimizer(cfg: Cfg, where: str) -> None:
    """The optimiser's settings (engine/optim.py): AdamW's weight decay and beta2, SGD's momentum,
    gradient clipping, the learning-rate schedule."""
    get, adam = cfg.get, cfg.optimizer == "adam"
    wd, beta2, mom, clip = get("weight_decay", 0.0), get("beta2", 0.999), get("momentum", 0.0), get("grad_clip", 0.0)
    check(_finite(wd) and wd >= 0, f"weight_decay must be >= 0, got {wd}", where)
    check(adam or wd == 0, "weight_decay applies to optimizer=adam (AdamW's decoupled decay), not sgd", where)
    check(_finite(beta2) and 0 < beta2 < 1, f"beta2 must be in (0, 1), got {beta2}", where)
    check(adam or beta2 == 0.999, "beta2 applies to optimizer=adam, not sgd", where)
    check(_finite(mom) and 0 <= mom < 1, f"momentum must be in [0, 1), got {mom}", where)
    check(not adam or mom == 0, "momentum applies to optimizer=sgd (Adam's is fixed at 0.9)", where)
    check(not get("nesterov", False) or (not adam and mom > 0), "nesterov=true needs optimizer=sgd and momentum > 0",
          where)
    check(_finite(clip) and clip >= 0, f"grad_clip must be >= 0 (0: off), got {clip}", where)
    schedule, warmup, steps, min_lr = (get("schedule", "constant"), get("warmup_steps", 0), get("decay_steps"),
                                       get("min_lr", 0.0))
    check(schedule in SCHEDULES, f"unknown schedule '{schedule}'; valid: {', '.join(SCHEDULES)}", where)
    check(warmup >= 0, f"warmup_steps must be >= 0, got {warmup}", where)
    check(steps is None or steps >= 1, f"decay_steps must be >= 1 (null: the run's total steps), got {steps}", where)
    check(_finite(min_lr) and 0 <= min_lr <= cfg.lr, f"min_lr must be in [0, lr={cfg.lr}], got {min_lr}", where)
    check(schedule == "cosine" or (warmup == 0 and steps is None and min_lr == 0),
          "warmup_steps, decay_steps and min_lr apply to schedule=cosine", where)


def _validate_synthetic(cfg: Cfg, where: str) -> None:
    """normal / uniform data."""
    from activation_bench.data import tables

    d = cfg.data
    check(d.n_samples is not None and d.n_samples >= 1, f"data.n_samples must be >= 1, got {d.n_samples}", where)
    check(d.input_dim is not None and d.input_dim >= 1, f"data.input_dim must be >= 1, got {d.input_dim}", where)
    check(d.n_val >= 0, f"data.n_val must be >= 0, got {d.n_val}", where)
    check(d.target in TARGETS, f"unknown data.target '{d.target}'; valid: {', '.join(TARGETS)}", where)
    check(d.teacher_hidden_dim >= 1, "data.teacher_hidden_dim must be >= 1", where)
    for key in tables.REAL_KEYS:
        check(d.get(key) is None, f"data.{key} applies to real and function data "
               f"({', '.join(tables.REAL)}), not {d.name}", where)
    if d.name == "normal":
        check(d.mean is not None and _finite(d.mean), "data.mean must be a number for normal data", where)
        check(d.std is not None and _finite(d.std) and d.std > 0, f"data.std must be > 0, got {d.std}", where)
        check(d.low is None and d.high is None, "data.low/high apply to uniform data, not normal", where)
    else:
        check(d.low is not None and d.high is not None and _finite(d.low) and _finite(d.high)
               and d.low < d.high, f"data.low must be < data.high, got [{d.low}, {d.high}]", where)
        check(d.mean is None and d.std is None, "data.mean/std apply to normal data, not uniform", where)
    if cfg.batch_size is not None:
        check(1 <= cfg.batch_size <= d.n_samples,
               f"batch_size must be between 1 and data.n_samples={d.n_samples}, got {cfg.batch_size}", where)
