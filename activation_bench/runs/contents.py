"""What a run directory's files hold: losses.csv (and grads.csv, preact.csv) in long format at full
precision, summary.json's content (with its completion marker, `status`), and config.yaml's text
(the config as it ran). store.py writes them; this module only says what they contain.
"""

from __future__ import annotations

import datetime as _dt
import functools
import platform
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from activation_bench import __version__
from activation_bench.engine.models import registry
from activation_bench.host import cpu_model

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg
    from activation_bench.engine.train import RunResult


# every per-epoch column a losses.csv may have, in the order written (a run has train_loss and
# those its task logs: held-out losses for real data, accuracies for classification); each is the
# RunResult field of the same name
COLUMNS = ("train_loss", "train_eval_loss", "val_loss", "test_loss", "val_acc", "test_acc")


def losses_csv(columns: dict[str, list[float]]) -> str:
    """Long format, one row per epoch (columns: train_loss first, then those the run has, in
    COLUMNS order), floats at full precision (repr round-trips exactly)."""
    train = columns["train_loss"]
    prefixes = _epoch_prefixes(len(train))
    names = [c for c in COLUMNS if c in columns]
    if names == ["train_loss"]:
        return "epoch,train_loss\n" + "\n".join(map(str.__add__, prefixes, reprs(train))) + "\n"
    rows = [e + ",".join(vals) for e, *vals in zip(prefixes, *(reprs(columns[c]) for c in names))]
    return f"epoch,{','.join(names)}\n" + "\n".join(rows) + "\n"


def reprs(values: Sequence[float]) -> list[str]:
    """repr() of each value, the shortest text that reads back as the same float, 2.5-4.5x faster:
    orjson writes the same shortest digits (Ryu's) at about 50 ns a float against repr's 550 (a
    sweep of 480 runs of 3000 epochs formats 1.4 million), and the same text where repr writes
    plain decimals (1e-4 <= |v| < 1e16) or an exponent of two or three digits (0 < |v| < 1e-9:
    "e-10", where a fitted loss ends); elsewhere (zeros, "e-05" against orjson's "0.00001",
    "e-06" against "e-6", "e+16" against "e16", and NaN and the infinities, which orjson writes
    as null) repr itself. Python floats and ints (not bools: orjson writes true) are what it takes;
    anything orjson refuses (a NumPy scalar) goes to repr whole."""
    try:
        text = orjson.dumps(values).decode()
    except TypeError:  # not Python floats and ints (a NumPy scalar): repr, as before
        return list(map(repr, values))
    if not values:
        return []
    out = text.removeprefix("[").removesuffix("]").split(",")
    size = np.abs(np.asarray(values, dtype=np.float64))
    with np.errstate(invalid="ignore"):  # NaN fails every comparison
        same = ((size >= 1e-4) & (size < 1e16)) | ((size > 0) & (size < 1e-9))
    for i in np.flatnonzero(~same).tolist():
        out[i] = repr(values[i])
    return out


_PREFIXES: list[str] = []


def _epoch_prefixes(n: int) -> list[str]:
    """["1,", "2,", ...]: shared by every run's table (a sweep writes hundreds of them)."""
    if len(_PREFIXES) < n:
        _PREFIXES.extend(f"{e}," for e in range(len(_PREFIXES) + 1, n + 1))
    return _PREFIXES[:n]


TEST_WINDOWS = "test_windows.csv"  # a text's whole test split, per window (engine/whole_split.py)


def test_windows_csv(columns: dict[str, list[float]]) -> str:
    """test_windows.csv: one row per window of the whole test split (window i scores characters
    i*B+1 .. i*B+B of the split), its mean loss (nats per character) and accuracy at the epoch of
    lowest validation loss and at the last, at full precision."""
    names = list(columns)
    rows = [f"{i}," + ",".join(vals) for i, vals in enumerate(zip(*(reprs(columns[c]) for c in names)))]
    return f"window,{','.join(names)}\n" + "\n".join(rows) + "\n"


def grads_csv(rows: Sequence[tuple[int, int, float, float]]) -> str:
    """grads.csv: long format, one row per logged epoch and hidden layer, raw floats."""
    return "epoch,layer,weight_grad_norm,act_norm\n" + "".join(f"{e},{k},{g!r},{a!r}\n" for e, k, g, a in rows)


def preact_csv(rows: Sequence[tuple[int, int, str, float]]) -> str:
    """preact.csv: long format, one row per logged epoch (0: initialisation), hidden layer and statistic."""
    return "epoch,layer,stat,value\n" + "".join(f"{e},{k},{s},{v!r}\n" for e, k, s, v in rows)


def _shares(values: Sequence[float] | None) -> list[float | None] | None:
    return None if values is None else [v if v == v else None for v in values]  # NaN (undefined) -> null


@functools.cache
def versions() -> dict[str, str]:
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "activation_bench": __version__}


def describe_model(model: dict[str, Any]) -> str:
    """A saved config's model in one line, as summary.json's `model` says it (its family's
    description); for the layers above the engine (the report's provenance)."""
    return registry.family(str(model.get("name") or "mlp")).describe(model)


def summary(cfg: Cfg, result: RunResult, cfg_hash: str, labels: dict[str, str] | None = None) -> dict:
    """summary.json's content; `status` is the completion marker."""
    import math

    tl = result.train_loss
    # sum() is a fast test that every loss is finite (an overflowing sum just takes the slow path)
    finite = tl if math.isfinite(sum(tl)) else [v for v in tl if math.isfinite(v)]
    best = min(finite) if finite else None
    out = {
        "status": result.status,
        "final_loss": tl[-1] if tl else None,
        "best_loss": best,
        "best_epoch": tl.index(best) + 1 if best is not None else None,
        "final_val_loss": result.val_loss[-1] if result.val_loss else None,
        **({"final_val_acc": result.val_acc[-1]} if getattr(result, "val_acc", None) else {}),
        **held_out(result),
        "epochs": int(cfg.epochs),
        "epochs_run": len(tl),
        "diverged_epoch": result.diverged_epoch,
        "seed": int(cfg.seed),
        "n_params": result.n_params,
        **registry.of(cfg).summary(cfg.model),  # depth: hidden layers (blocks); model: the architecture
        "init": cfg.model.get("init_resolved"),
        "dead_units": _shares(getattr(result, "dead_units", None)),  # per hidden layer, share of units
        "saturated_units": _shares(getattr(result, "saturated_units", None)),
        "wall_time_s": result.wall_time_s,
        "stack_size": result.stack_size,
        "device": result.device,
        "engine": result.engine,  # the engine that ran (engine=auto resolved, or a fallback)
        # the CPU and torch's thread count decide a CPU run's last bits (docs/reproducibility.md)
        "cpu": cpu_model(),
        "threads": getattr(result, "threads", None) or None,
        "config_hash": cfg_hash,
        "labels": labels or {},
        "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "versions": dict(versions()),
    }
    out.update(getattr(result, "model_info", None) or {})  # model=module: activation_sites (way, via, modules)
    if getattr(result, "learned", None):  # activation=expr with activation.learnable=true
        out["learned"] = {k: [v if math.isfinite(v) else None for v in vals] for k, vals in result.learned.items()}
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def held_out(result: RunResult) -> dict[str, Any]:
    """summary.json's entries for real and function tasks: the final test loss and RMSE (in the
    target's own units; a classifier: its test accuracy), the epoch of the lowest validation loss
    (earliest on ties) and the test loss and RMSE (accuracy) there, and the data's split sizes,
    source and scaling."""
    import math

    test, info = result.test_loss, result.data_info
    if not test or not info:
        return {}
    scale = float(info.get("target_scale", 1.0))

    def rmse(mse: float) -> float | None:
        return math.sqrt(mse) * scale if math.isfinite(mse) else None

    val = result.val_loss or []
    finite = [(v, i) for i, v in enumerate(val) if math.isfinite(v)]
    best = min(finite)[1] if finite else None  # min over (loss, index): earliest on ties
    acc = getattr(result, "test_acc", None)
    # a classifier's cross-entropy has no RMSE: its accuracy stands in that place
    kind, at = ("acc", acc.__getitem__) if acc else ("rmse", lambda i: rmse(test[i]))
    return {
        "final_test_loss": test[-1],
        f"final_test_{kind}": at(-1),
        "early_stop_epoch": best + 1 if best is not None else None,
        "early_stop_val_loss": val[best] if best is not None else None,
        "early_stop_test_loss": test[best] if best is not None else None,
        f"early_stop_test_{kind}": at(best) if best is not None else None,
        "data": dict(info),
    }


def ran_config(cfg: Cfg, result: RunResult) -> Cfg:
    """The config as it ran: `engine` set to the engine the run's stack used (engine=auto resolved,
    or eager where the compiled engine fell back), so re-running config.yaml uses the same one. Its
    hash stays the one of the config as asked (summary.json's config_hash, what resume matches)."""
    if cfg.engine == result.engine:
        return cfg
    return type(cfg)({**cfg, "engine": result.engine})


def saved_yaml(cfg: Cfg) -> str:
    """config.yaml's text: the resolved config, its data subtree with its own source's keys only
    (data/keys.py: the keys left out hold their defaults, which re-composing restores)."""
    from activation_bench.data.keys import saved_data

    return type(cfg)({**cfg, "data": saved_data(cfg["data"], _data_defaults())}).to_yaml()


@functools.cache
def _data_defaults() -> dict[str, Any]:
    """The schema's data.* defaults (once per process)."""
    from dataclasses import asdict

    from activation_bench.config.schema import DataConfig

    return asdict(DataConfig())
