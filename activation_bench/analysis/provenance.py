"""Provenance for `actbench report`: how to rerun a study and what it ran on.

The sweep command lines from `sweep.yaml`, one member's resolved `config.yaml`, the versions,
devices and dates in the runs' `summary.json`, and the report host's CPU/GPU (read from /proc, no
torch import).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
from pathlib import Path
from typing import Any

from activation_bench import __version__
from activation_bench.analysis.loading import Loaded
from activation_bench.cfg import load_yaml
from activation_bench.host import cpu_model, describe_code, torch_threads


def _run_dirs(loaded: Loaded) -> list[Path]:
    """The run directories behind the loaded runs (none for plain CSV inputs)."""
    out = []
    runs = loaded.runs["run"] if "run" in loaded.runs.columns else [None] * len(loaded.runs)
    for source, run in zip(loaded.runs["source"], runs):
        src = Path(str(source))
        if run and (src / str(run) / "summary.json").is_file():
            out.append(src / str(run))
        elif (src / "summary.json").is_file():
            out.append(src)
    return out


def _cpu() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores"


def _gpus() -> list[str]:
    """NVIDIA GPUs named by the driver (read from /proc, without importing torch)."""
    out = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            lines = info.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        out += [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Model:")]
    return out


def _package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _architectures(summaries: list[dict[str, Any]], config: Path | None) -> list[str]:
    """The models the runs trained, in words: a convnet's summary names it (`model`); an MLP's
    is read from the one config.yaml the report shows (MLP runs' summaries predate the key)."""
    import yaml

    from activation_bench.errors import UsageError
    from activation_bench.runs.contents import describe_model

    names = {str(s["model"]) for s in summaries if s.get("model")}
    if config is not None and any(not s.get("model") for s in summaries):
        try:
            model = (load_yaml(config.read_text(encoding="utf-8")) or {}).get("model") or {}
            names.add(describe_model(model))
        except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, UsageError):
            pass
    return sorted(names)


def provenance(loaded: Loaded, command: str) -> dict[str, Any]:
    """How to rerun it: the sweep command lines, one member's resolved config, versions, machine, dates."""
    import yaml

    from activation_bench.runs.store import read_summary

    sweeps = []
    for source in dict.fromkeys(str(s) for s in loaded.runs["source"]):
        plan = Path(source) / "sweep.yaml"
        if plan.is_file():
            try:
                overrides = (load_yaml(plan.read_text(encoding="utf-8")) or {}).get("overrides") or []
            except (OSError, yaml.YAMLError, AttributeError):
                overrides = None
            line = shlex.join(["actbench", "sweep", *map(str, overrides)]) if overrides is not None else None
            sweeps.append({"dir": source, "command": line or "(sweep.yaml unreadable)"})
    dirs = _run_dirs(loaded)
    summaries = [s for s in map(read_summary, dirs) if s]
    config = next(((d, d / "config.yaml") for d in dirs if (d / "config.yaml").is_file()), None)
    versions = sorted({", ".join(f"{k} {v}" for k, v in sorted((s.get("versions") or {}).items()))
                       for s in summaries} - {""})
    created = sorted(str(s["created"]) for s in summaries if s.get("created"))
    code = sorted({f"{s['code'].get('target')} from {describe_code(s['code'])}" for s in summaries
                   if isinstance(s.get("code"), dict) and s["code"].get("sha256")})
    return {
        "command": command, "sweeps": sweeps,
        "config_run": str(config[0]) if config else None,
        "config_text": config[1].read_text(encoding="utf-8", errors="replace") if config else None,
        "run_versions": versions,
        "architectures": _architectures(summaries, config[1] if config else None),
        "code": code,  # model=module: the user's code each run recorded
        "devices": sorted({str(s.get("device")) for s in summaries if s.get("device")}),
        "machines": sorted({f"{s['cpu']}, {torch_threads(s['threads'])}"
                            for s in summaries if s.get("cpu") and s.get("threads")}),
        "created": (created[0], created[-1]) if created else None,
        "n_summaries": len(summaries),
        "host": {"cpu": _cpu(), "gpus": _gpus() or ["none found"], "platform": platform.platform(),
                 "python": platform.python_version(), "actbench": __version__, "torch": _package_version("torch")},
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
