"""Range checks of a composed config beyond the schema's types: one clear line (UsageError) per
problem, before anything is written. Also derives model.init_resolved (the scheme that runs)."""

from __future__ import annotations

import math
from typing import Any

from activation_bench.cfg import Cfg, model_name
from activation_bench.config.schema import (
    CNN_NORMS,
    DEVICES,
    DISTRIBUTIONS,
    DTYPES,
    ENGINES,
    INITS,
    MODELS,
    NORMS,
    OPTIMIZERS,
    TARGETS,
)
from activation_bench.errors import UsageError


def _check(ok: bool, message: str, where: str) -> None:
    if not ok:
        raise UsageError(f"{message}" + (f" (in: {where})" if where else ""))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(cfg: Cfg, where: str = "") -> None:
    """Range checks beyond the schema's types; raises UsageError with one clear line."""
    d = cfg.data
    _check(cfg.epochs >= 1, f"epochs must be a positive integer, got {cfg.epochs}", where)
    _check(_finite(cfg.lr) and cfg.lr > 0, f"lr must be a positive number, got {cfg.lr}", where)
    _check(cfg.seed >= 0, f"seed must be >= 0, got {cfg.seed}", where)
    _check(cfg.optimizer in OPTIMIZERS, f"unknown optimizer '{cfg.optimizer}'; valid: {', '.join(OPTIMIZERS)}", where)
    _check(cfg.dtype in DTYPES, f"unknown dtype '{cfg.dtype}'; valid: {', '.join(DTYPES)}", where)
    _check(cfg.device in DEVICES, f"unknown device '{cfg.device}'; valid: {', '.join(DEVICES)}", where)
    engine = cfg.get("engine", "eager")
    _check(engine in ENGINES, f"unknown engine '{engine}'; valid: {', '.join(ENGINES)}", where)
    _check(cfg.log.every >= 1, f"log.every must be a positive integer, got {cfg.log.every}", where)
    ck = cfg.get("checkpoint") or {}
    secs, every = ck.get("seconds", 300.0), ck.get("every", 0)
    _check(_finite(secs) and secs >= 0, f"checkpoint.seconds must be >= 0 (0: not by time), got {secs}", where)
    _check(every >= 0, f"checkpoint.every must be >= 0 (0: not by epochs), got {every}", where)
    k = cfg.log.preact_stats
    _check(k >= 0, f"log.preact_stats must be >= 0 (0: off; K: every K epochs), got {k}", where)
    family = model_name(cfg)
    _check(family in MODELS, f"unknown model '{family}'; valid: {', '.join(MODELS)}", where)
    norms = NORMS if family == "mlp" else CNN_NORMS
    which = " for model=cnn" if family == "cnn" else ""
    _check(cfg.model.norm in norms, f"unknown model.norm '{cfg.model.norm}'{which}; valid: {', '.join(norms)}", where)
    p = cfg.model.dropout
    _check(_finite(p) and 0 <= p < 1, f"model.dropout must be in [0, 1) (the probability of dropping a unit), got {p}",
           where)
    if family == "mlp":
        _check(cfg.model.hidden_dim >= 1, f"model.hidden_dim must be >= 1, got {cfg.model.hidden_dim}", where)
        _check(cfg.model.depth >= 1, f"model.depth must be a positive integer (hidden layers), got {cfg.model.depth}",
               where)
    from activation_bench.data import tables

    names = (*DISTRIBUTIONS, *tables.REAL)
    _check(d.name in names, f"unknown data '{d.name}'; valid: {', '.join(sorted(names))}", where)
    tables.check_task(d, where)
    _check(_finite(d.noise) and d.noise >= 0, f"data.noise must be >= 0, got {d.noise}", where)
    if d.name in tables.REAL:
        _check(d.n_val == 0, f"data.n_val does not apply to data={d.name}; use data.val_fraction", where)
        tables.validate(cfg, where)
    else:
        _validate_synthetic(cfg, where)
    from activation_bench.engine import activations

    activations.check_config(cfg.activation, where, cfg.dtype)
    _resolve_init(cfg, where)
    if family == "cnn":
        _check_cnn(cfg, where)
    elif cfg.model.norm == "batch":
        _check_batch_rows(cfg, where)
    if family == "mlp" and cfg.model.residual and cfg.model.depth >= 2:
        _check_residual_widths(cfg, where)
    if d.name in DISTRIBUTIONS and d.target == "teacher":
        activations.check_config({"name": d.teacher_activation}, where)


def _validate_synthetic(cfg: Cfg, where: str) -> None:
    """normal / uniform data."""
    from activation_bench.data import tables

    d = cfg.data
    _check(d.n_samples is not None and d.n_samples >= 1, f"data.n_samples must be >= 1, got {d.n_samples}", where)
    _check(d.input_dim is not None and d.input_dim >= 1, f"data.input_dim must be >= 1, got {d.input_dim}", where)
    _check(d.n_val >= 0, f"data.n_val must be >= 0, got {d.n_val}", where)
    _check(d.target in TARGETS, f"unknown data.target '{d.target}'; valid: {', '.join(TARGETS)}", where)
    _check(d.teacher_hidden_dim >= 1, "data.teacher_hidden_dim must be >= 1", where)
    for key in tables.REAL_KEYS:
        _check(d.get(key) is None, f"data.{key} applies to real and function data "
               f"({', '.join(tables.REAL)}), not {d.name}", where)
    if d.name == "normal":
        _check(d.mean is not None and _finite(d.mean), "data.mean must be a number for normal data", where)
        _check(d.std is not None and _finite(d.std) and d.std > 0, f"data.std must be > 0, got {d.std}", where)
        _check(d.low is None and d.high is None, "data.low/high apply to uniform data, not normal", where)
    else:
        _check(d.low is not None and d.high is not None and _finite(d.low) and _finite(d.high)
               and d.low < d.high, f"data.low must be < data.high, got [{d.low}, {d.high}]", where)
        _check(d.mean is None and d.std is None, "data.mean/std apply to normal data, not uniform", where)
    if cfg.batch_size is not None:
        _check(1 <= cfg.batch_size <= d.n_samples,
               f"batch_size must be between 1 and data.n_samples={d.n_samples}, got {cfg.batch_size}", where)


def _check_cnn(cfg: Cfg, where: str) -> None:
    """model=cnn: data with an input shape (sequences or images), and a geometry that leaves every
    block some positions (conv_shapes.blocks names the block and the sizes otherwise)."""
    from activation_bench.data.shapes import SHAPES, input_shape
    from activation_bench.engine.conv_shapes import blocks

    shape = input_shape(cfg)
    _check(shape is not None, f"model=cnn needs sequence or image data ({', '.join(SHAPES)}); data={cfg.data.name}'s "
           "features have no positions to convolve over (use model=mlp)", where)
    try:
        blocks(shape, cfg.model)  # type: ignore[arg-type]
    except ValueError as exc:
        raise UsageError(str(exc) + (f" (in: {where})" if where else "")) from None


def _resolve_init(cfg: Cfg, where: str) -> None:
    """Check model.init and record the scheme that runs in model.init_resolved (auto: the activation's
    registry recommendation), so config.yaml says what ran and re-running it gives the same hash."""
    from activation_bench.engine import activations

    m = cfg.model
    _check(m.init in INITS, f"unknown model.init '{m.init}'; valid: {', '.join(INITS)}", where)
    resolved = m.init
    if m.init == "auto":
        _check(not activations.has_target(cfg.activation),
               "model.init=auto needs a registered activation (a _target_ one has no recommendation); "
               "choose torch_default, he, lecun or xavier", where)
        _check(not activations.is_expr(cfg.activation),
               "model.init=auto needs a registered activation (an expression has no recommendation); "
               "choose torch_default, he, lecun or xavier", where)
        resolved = activations.get_spec(cfg.activation["name"]).init
    _check(m.get("init_resolved") in (None, resolved),
           f"model.init_resolved is derived from model.init ({resolved} here), got '{m.get('init_resolved')}'",
           where)
    m["init_resolved"] = resolved


def _check_batch_rows(cfg: Cfg, where: str) -> None:
    """model.norm=batch standardises each unit over a batch's rows: every training batch needs two."""
    from activation_bench.data import tables

    n = tables.shapes(cfg)[0] if tables.is_real(cfg.data) else cfg.data.n_samples
    bs = cfg.batch_size or n
    what = ("the training split has 1 row" if n == 1 else f"batch_size={bs} gives batches of 1 row" if bs == 1
            else f"batch_size={bs} over {n} training rows leaves a last batch of 1 row")
    _check(min(bs, n % bs or bs) >= 2, "model.norm=batch needs at least 2 rows in every training batch (a unit's "
           f"batch statistics over one row are undefined), but {what}", where)


def _check_residual_widths(cfg: Cfg, where: str) -> None:
    """model.residual adds a hidden layer's input to its activation's output: the widths must match.
    A registered or expression activation returns the width the engine plans (a gated one halves
    its 2h inputs to the h its layer takes); a user's module (activation._target_) is tried."""
    from activation_bench.engine import activations

    if not activations.has_target(cfg.activation):
        return
    import torch

    h1, h2 = activations.hidden_width(dict(cfg.activation), cfg.model.hidden_dim)
    try:
        width = activations.create_from_config(dict(cfg.activation))(torch.zeros(1, 2, h1)).shape[-1]
    except Exception as exc:  # noqa: BLE001 - user code; report, don't crash
        raise UsageError(f"activation._target_ '{cfg.activation['_target_']}' failed on a [1, 2, {h1}] input: "
                         f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                         + (f" (in: {where})" if where else "")) from None
    _check(width == h2, f"model.residual=true adds each hidden layer's input ({h2} wide) to its output, but "
           f"activation._target_ '{cfg.activation['_target_']}' turns {h1} values into {width}; "
           "use model.residual=false", where)
