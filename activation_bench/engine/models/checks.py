"""Validation the model families share (their `validate` methods call these): one clear line
(UsageError) per problem, before anything is written. No torch at import."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from activation_bench.errors import UsageError, at, check

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_dropout(p: Any, where: str, key: str = "model.dropout") -> None:
    """model.dropout (or another dropout key): a probability in [0, 1)."""
    check(_finite(p) and 0 <= p < 1, f"{key} must be in [0, 1) (the probability of dropping a unit), got {p}",
          where)


def resolve_init(cfg: Cfg, inits: tuple[str, ...], where: str) -> None:
    """Check model.init against the family's schemes and record the scheme that runs in
    model.init_resolved (auto: the activation's
    registry recommendation), so config.yaml says what ran and re-running it gives the same hash."""
    from activation_bench.engine.activations import registry as activations

    m = cfg.model
    check(m.init in inits, f"unknown model.init '{m.init}'; valid: {', '.join(inits)}", where)
    resolved = m.init
    if m.init == "auto":
        check(not activations.has_target(cfg.activation),
               "model.init=auto needs a registered activation (a _target_ one has no recommendation); "
               "choose torch_default, he, lecun or xavier", where)
        check(not activations.is_expr(cfg.activation),
               "model.init=auto needs a registered activation (an expression has no recommendation); "
               "choose torch_default, he, lecun or xavier", where)
        resolved = activations.get_spec(cfg.activation["name"]).init
    check(m.get("init_resolved") in (None, resolved),
           f"model.init_resolved is derived from model.init ({resolved} here), got '{m.get('init_resolved')}'",
           where)
    m["init_resolved"] = resolved


def check_batch_rows(cfg: Cfg, where: str) -> None:
    """model.norm=batch standardises each unit over a batch's rows: every training batch needs two."""
    from activation_bench.data import tables

    n = tables.shapes(cfg)[0] if tables.is_real(cfg.data) else cfg.data.n_samples
    bs = cfg.batch_size or n
    what = ("the training split has 1 row" if n == 1 else f"batch_size={bs} gives batches of 1 row" if bs == 1
            else f"batch_size={bs} over {n} training rows leaves a last batch of 1 row")
    check(min(bs, n % bs or bs) >= 2, "model.norm=batch needs at least 2 rows in every training batch (a unit's "
           f"batch statistics over one row are undefined), but {what}", where)


def check_residual_widths(cfg: Cfg, where: str) -> None:
    """model.residual adds a hidden layer's input to its activation's output: the widths must match.
    A registered or expression activation returns the width the engine plans (a gated one halves
    its 2h inputs to the h its layer takes); a user's module (activation._target_) is tried."""
    from activation_bench.engine.activations import registry as activations

    if not activations.has_target(cfg.activation):
        return
    import torch

    h1, h2 = activations.hidden_width(dict(cfg.activation), cfg.model.hidden_dim)
    try:
        width = activations.create_from_config(dict(cfg.activation))(torch.zeros(1, 2, h1)).shape[-1]
    except Exception as exc:  # noqa: BLE001 - user code; report, don't crash
        raise UsageError(f"activation._target_ '{cfg.activation['_target_']}' failed on a [1, 2, {h1}] input: "
                         f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                         + at(where)) from None
    check(width == h2, f"model.residual=true adds each hidden layer's input ({h2} wide) to its output, but "
           f"activation._target_ '{cfg.activation['_target_']}' turns {h1} values into {width}; "
           "use model.residual=false", where)
