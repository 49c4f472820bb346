"""Which `data.*` keys each data source uses, so that a run's saved config.yaml lists its own
source's keys only (a star98 run has no `mean`, `low` or `teacher_activation`), as Hydra's
per-option configs would.

The schema still has every key: a config is composed and validated whole, and its hash is taken
whole. Only the saved file leaves out a key the source does not use, and only while it holds its
default (null, or the schema's value): composing the saved file again (`actbench run --config`)
restores exactly those values, so the re-run's config and hash are the original's. Saved configs
that list every key (the format before) re-run as they always did.
"""

from __future__ import annotations

from typing import Any

COMMON = ("name", "task")
SYNTHETIC = ("n_samples", "input_dim", "target", "n_val")
TEACHER = ("noise", "teacher_activation", "teacher_hidden_dim")  # target=teacher only
SPLIT = ("target", "features", "val_fraction", "test_fraction", "standardize", "dropna")
FUNCTION = ("fn", "n_samples", "noise", "val_fraction", "test_fraction", "standardize", "dropna")


def used_keys(data: dict[str, Any]) -> tuple[str, ...]:
    """The keys of data's own source."""
    name = data.get("name")
    if name in ("normal", "uniform"):
        moments = ("mean", "std") if name == "normal" else ("low", "high")
        teacher = TEACHER if data.get("target") == "teacher" else ()
        return (*COMMON, *SYNTHETIC, *moments, *teacher)
    if name == "function":
        return (*COMMON, *FUNCTION)
    from activation_bench.data.images import NAMES as IMAGES

    if name in IMAGES:
        return (*COMMON, "root", "n_train", *SPLIT)
    subsample = ("n_train",) if data.get("task") == "classification" else ()  # classification data only
    if name == "csv":
        return (*COMMON, "path", "sha256", *SPLIT, *subsample)
    return (*COMMON, *SPLIT, *subsample)  # the bundled tables and generated class data


def saved_data(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """data without the keys its source does not use that hold null or their default (in
    `defaults`, the schema's values); a key holding anything else is kept, so nothing is lost."""
    used = set(used_keys(data))
    return {k: v for k, v in data.items() if k in used or not (v is None or (k in defaults and v == defaults[k]
                                                                          and type(v) is type(defaults[k])))}
