"""Sweeps and runs into MLflow: a parent run per sweep directory, a child run per member.

`collect(paths)` reads everything first (through `analysis.loading`, so the losses are exactly
those `compare` reads) and writes nothing; `export(...)` then connects, resolves the experiments
and logs each member with one `MlflowClient.log_batch` call (MLflow splits it into its per-call
limits). Members are matched by their config hash within an experiment, so exporting again adds
only what is missing. A member is tagged with its hash when it is created and marked FINISHED
only after its metrics, params and artifact are in: a member left unfinished by an interrupted
export is deleted and logged again by the next one.

mlflow is imported inside the functions that talk to it; this module never imports torch.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from activation_bench import __version__
from activation_bench.analysis.configs import flatten_config, read_yaml
from activation_bench.analysis.loading import ACCURACIES, COLUMNS, load
from activation_bench.errors import UsageError
from activation_bench.runs.store import DONE_STATUSES, read_summary

DEFAULT_URI = "sqlite:///mlflow.db"  # MLflow's own default since 3.7, in the working directory
INSTALL = "pip install 'activation-bench[mlflow]'"
KIND, SWEEP, HASH, STATUS, VERSION = (f"actbench.{k}" for k in ("kind", "sweep", "config_hash", "status", "version"))
PARENT = "mlflow.parentRunId"
KIND_TAG = "mlflow.experimentKind"  # MLflow 3's UI opens a model-training experiment on its runs
MAX_EXPERIMENT_NAME = 500  # mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH
_BAD_KEY = re.compile(r"[^/\w.\- :]")  # MLflow's param-name rule (mlflow.utils.validation)
Progress = Callable[[int, int], None]


@dataclass
class Member:
    """One finished run, read and ready to log."""

    name: str
    run_dir: Path
    sweep: Path | None
    experiment: str
    config_hash: str
    status: str
    version: str
    params: dict[str, str]
    epoch: np.ndarray
    losses: dict[str, np.ndarray]
    start_ms: int
    end_ms: int


@dataclass
class Plan:
    members: list[Member]
    skipped: list[str] = field(default_factory=list)


@dataclass
class Exported:
    tracking_uri: str
    experiments: dict[str, str]  # name -> id
    added: int = 0
    present: int = 0
    sweeps: int = 0  # parent runs created or updated
    skipped: list[str] = field(default_factory=list)


def resolve_uri(uri: str | None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def check_experiment_name(name: str) -> str:
    if not name.strip() or len(name) > MAX_EXPERIMENT_NAME:
        raise UsageError(f"--experiment '{name[:60]}': MLflow needs a name of 1 to {MAX_EXPERIMENT_NAME} characters")
    return name


# ---------------------------------------------------------------------------------------------
# reading (no MLflow)

def collect(paths: Sequence[str | Path], experiment: str | None = None) -> Plan:
    """Every finished run under the inputs (sweep and run directories), with its losses (and a
    classification run's accuracies) as in results.csv (or losses.csv), its flattened config and
    its summary. Writes nothing."""
    for raw in paths:
        if Path(raw).is_file():
            raise UsageError(f"{raw}: export takes sweep and run directories, not files")
    loaded = load(paths)
    plan = Plan([], list(loaded.warnings))
    names = [n for n in COLUMNS if n in loaded.losses]
    for i, (source, run) in enumerate(zip(loaded.runs["source"], loaded.runs["run"])):
        lo, hi = loaded.bounds[i], loaded.bounds[i + 1]
        losses = {n: loaded.losses[n][lo:hi] for n in names}
        losses = {n: v for n, v in losses.items() if n == "train_loss" or not np.isnan(v).all()}
        member = _member(Path(source), str(run), loaded.epoch[lo:hi], losses, experiment, plan.skipped)
        if member is not None:
            plan.members.append(member)
    plan.skipped = list(dict.fromkeys(plan.skipped))  # loading names some incomplete runs already
    if not plan.members:
        raise UsageError(f"no finished runs to export in {', '.join(map(str, paths))}")
    return plan


def _member(source: Path, run: str, epoch: np.ndarray, losses: dict[str, np.ndarray], experiment: str | None,
            skipped: list[str]) -> Member | None:
    run_dir = source / run if (source / run).is_dir() else source
    if run_dir.name != run:
        skipped.append(f"run skipped (no run directory for {run} in {source})")
        return None
    summary = read_summary(run_dir)
    if not summary or summary.get("status") not in DONE_STATUSES:
        skipped.append(f"incomplete run skipped (no finished summary.json): {run_dir}")
        return None
    if not summary.get("config_hash") or not (run_dir / "config.yaml").is_file():
        skipped.append(f"run skipped (no config hash or config.yaml): {run_dir}")
        return None
    sweep = run_dir.parent if (run_dir.parent / "sweep.yaml").is_file() else None
    end = _created_ms(summary.get("created")) or _mtime_ms(run_dir / "summary.json")
    start = end - int(1000 * float(summary.get("wall_time_s") or 0.0))
    return Member(
        name=run, run_dir=run_dir, sweep=sweep,
        experiment=experiment or (sweep or run_dir.parent).resolve().name,
        config_hash=str(summary["config_hash"]), status=str(summary["status"]),
        version=str((summary.get("versions") or {}).get("activation_bench", "")),
        params=member_params(read_yaml(run_dir / "config.yaml"), summary, run),
        epoch=epoch, losses=losses, start_ms=start, end_ms=end,
    )


def member_params(config: dict, summary: dict, run: str) -> dict[str, str]:
    """The flattened resolved config, then the columns results.csv adds (swept keys, run, n_params)
    and, for model=module, the code the run recorded (code.file, code.sha256, code.version)."""
    out = {k: _text(v) for k, v in flatten_config(config).items()}
    extra = {**(summary.get("labels") or {}), "run": run, "n_params": summary.get("n_params")}
    code = summary.get("code") if isinstance(summary.get("code"), dict) else {}
    extra.update({f"code.{k}": v for k, v in code.items() if k != "target"})  # model.target is a config key
    out.update({str(k): _text(v) for k, v in extra.items() if str(k) not in out})
    return {_BAD_KEY.sub("_", k)[:250]: v[:6000] for k, v in out.items()}


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _created_ms(text: Any) -> int | None:
    try:
        return int(_dt.datetime.fromisoformat(str(text)).timestamp() * 1000)
    except ValueError:
        return None


def _mtime_ms(path: Path) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return int(_dt.datetime.now().timestamp() * 1000)


def summary_metrics(epoch: np.ndarray, losses: dict[str, np.ndarray]) -> list[tuple[str, float, int]]:
    """(key, value, step): final and best of each column (the lowest loss, the highest accuracy),
    and with val_loss the early-stopping point (the epoch of the lowest val_loss, earliest on ties:
    compare's `early_stop`; there a classification run's `early_stop_test_acc`). Non-finite
    values are left out."""
    out: list[tuple[str, float, int]] = []
    if not len(epoch):
        return out
    for name, y in losses.items():
        out.append((f"final_{name}", float(y[-1]), int(epoch[-1])))
        finite = np.flatnonzero(np.isfinite(y))
        if len(finite):
            i = int(finite[np.argmax(y[finite]) if name in ACCURACIES else np.argmin(y[finite])])
            out.append((f"best_{name}", float(y[i]), int(epoch[i])))
    val = losses.get("val_loss")
    if val is not None and np.isfinite(val).any():
        i = int(np.nanargmin(np.where(np.isfinite(val), val, np.nan)))
        out.append(("early_stop_epoch", float(epoch[i]), int(epoch[i])))
        out += [(f"early_stop_{n}", float(y[i]), int(epoch[i])) for n, y in losses.items() if n != "val_loss"]
    return [m for m in out if math.isfinite(m[1])]


def kept_epochs(epoch: np.ndarray, every: int) -> np.ndarray:
    """Indices of every `every`-th epoch, plus the last."""
    keep = epoch % every == 0
    if len(keep):
        keep[-1] = True
    return np.flatnonzero(keep)


# ---------------------------------------------------------------------------------------------
# writing

def export(paths: Sequence[str | Path], tracking_uri: str | None = None, experiment: str | None = None,
           every: int = 1, progress: Progress | None = None) -> Exported:
    """Export the finished runs under `paths`; returns what was added, what was there already
    (matched by config hash) and what was skipped. Bad input raises UsageError before any write."""
    if every < 1:
        raise UsageError(f"--every {every}: needs a positive number of epochs")
    if experiment is not None:
        check_experiment_name(experiment)
    plan = collect(paths, experiment)
    uri = resolve_uri(tracking_uri)
    with _undo_new_store(uri):
        client = connect(uri)
        ids = {m.experiment: "" for m in plan.members}
        ids = {name: experiment_id(client, name) for name in ids}
    result = Exported(uri, ids, skipped=plan.skipped)
    done, total = 0, len(plan.members)
    for name, eid in ids.items():
        members = [m for m in plan.members if m.experiment == name]
        writer = _Writer(client, eid, every)
        for m in members:
            if writer.log_member(m):
                result.added += 1
            else:
                result.present += 1
            done += 1
            if progress:
                progress(done, total)
        result.sweeps += writer.close_sweeps()
    return result


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError as exc:
        raise UsageError(f"MLflow is not installed ({exc.name or exc}): {INSTALL}") from None
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."
    return mlflow


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _sqlite_file(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?")[0]
    return Path(path) if path and path != ":memory:" else None


@contextlib.contextmanager
def _undo_new_store(uri: str) -> Iterator[None]:
    """A SQLite file (and the folders MLflow makes for it) that this block creates is removed if
    the block fails: nothing half-exported."""
    db = _sqlite_file(uri)
    made = [] if db is None or db.exists() else [db, *(p for p in db.absolute().parents if not p.exists())]
    try:
        yield
    except BaseException:
        for path in made:  # the file, then its new folders from the deepest
            with contextlib.suppress(OSError):
                path.unlink() if path is db else path.rmdir()
        raise


@contextlib.contextmanager
def _quick_http() -> Iterator[None]:
    """One try and a 20 s timeout for the connection check, unless the user set MLflow's own
    (its default retries with back-off for minutes before saying a server is unreachable)."""
    keys = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
    added = [k for k in keys if k not in os.environ]
    os.environ.update({k: keys[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def connect(uri: str) -> Any:
    """An MlflowClient on `uri`, checked with one request; UsageError if it cannot be used."""
    mlflow = _mlflow()
    with _quick_http():
        try:
            client = mlflow.MlflowClient(tracking_uri=uri)
            client.search_experiments(max_results=1)
        except ModuleNotFoundError as exc:
            raise UsageError(f"tracking URI {uri} needs {exc.name}: {INSTALL}") from None
        except Exception as exc:  # MLflow, SQLAlchemy, requests and OS errors alike
            raise UsageError(f"cannot use tracking URI {uri}: {_first_line(exc)}") from None
    return client


def experiment_id(client: Any, name: str) -> str:
    """The experiment's id, created if missing; a deleted one or a refused name is an error."""
    from mlflow.exceptions import MlflowException

    try:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            return str(client.create_experiment(name, tags={KIND_TAG: "custom_model_development"}))
    except MlflowException as exc:
        raise UsageError(f"experiment '{name}': {_first_line(exc)}") from None
    if exp.lifecycle_stage != "active":
        raise UsageError(f"experiment '{name}' is deleted in this tracking store: restore it "
                         "(mlflow experiments restore) or choose another --experiment")
    return str(exp.experiment_id)


class _Writer:
    """Logs members into one experiment, creating each sweep's parent run when first needed."""

    def __init__(self, client: Any, experiment_id: str, every: int) -> None:
        self.client, self.eid, self.every = client, experiment_id, every
        self.hashes: set[str] = set()
        self.parents: dict[str, str] = {}  # sweep directory name -> run id
        self.touched: dict[str, tuple[Path, int]] = {}  # sweeps with new members: directory, end time
        self._read_existing()

    def _read_existing(self) -> None:
        from mlflow.entities import RunStatus

        finished = RunStatus.to_string(RunStatus.FINISHED)
        token = None
        while True:
            page = self.client.search_runs([self.eid], max_results=5000, page_token=token)
            for run in page:
                tags = run.data.tags
                if tags.get(KIND) == "sweep" and tags.get(SWEEP):
                    self.parents.setdefault(tags[SWEEP], run.info.run_id)
                elif tags.get(KIND) == "member" and tags.get(HASH):
                    if run.info.status == finished:
                        self.hashes.add(tags[HASH])
                    else:  # left unfinished by an interrupted export: logged again below
                        self.client.delete_run(run.info.run_id)
            token = page.token
            if not token:
                break

    def log_member(self, m: Member) -> bool:
        """Log one member; False if its config hash is in the experiment already."""
        from mlflow.exceptions import MlflowException

        if m.config_hash in self.hashes:
            return False
        tags, metrics, params = payload(m, self.every)
        if m.sweep is not None:
            tags[PARENT] = self._parent(m)
        run_id = None
        try:
            run_id = self.client.create_run(self.eid, start_time=m.start_ms, tags=tags, run_name=m.name).info.run_id
            self.client.log_batch(run_id, metrics=metrics, params=params)
            self.client.log_artifact(run_id, str(m.run_dir / "config.yaml"))
            self.client.set_terminated(run_id, "FINISHED", end_time=m.end_ms)
        except BaseException as exc:
            if run_id is not None:
                with contextlib.suppress(Exception):
                    self.client.delete_run(run_id)
            if isinstance(exc, (MlflowException, OSError)):
                raise UsageError(f"{m.run_dir}: MLflow refused it: {_first_line(exc)}") from None
            raise
        self.hashes.add(m.config_hash)
        if m.sweep is not None:
            _, end = self.touched.get(m.sweep.name, (m.sweep, 0))
            self.touched[m.sweep.name] = (m.sweep, max(end, m.end_ms))
        return True

    def _parent(self, m: Member) -> str:
        assert m.sweep is not None
        name = m.sweep.name
        if name not in self.parents:
            overrides = [str(o) for o in (read_yaml(m.sweep / "sweep.yaml").get("overrides") or [])]
            tags = {KIND: "sweep", SWEEP: name, VERSION: __version__}
            run = self.client.create_run(self.eid, start_time=m.start_ms, tags=tags, run_name=name)
            self.client.log_batch(run.info.run_id, params=sweep_params(overrides))
            self.parents[name] = run.info.run_id
        return self.parents[name]

    def close_sweeps(self) -> int:
        """Each sweep that gained members: its files as artifacts, and its run marked finished."""
        for name, (sweep, end) in self.touched.items():
            run_id = self.parents[name]
            for file in ("results.csv", "sweep.yaml", "report.html"):
                if (sweep / file).is_file():
                    self.client.log_artifact(run_id, str(sweep / file))
            self.client.set_terminated(run_id, "FINISHED", end_time=end)
        return len(self.touched)


def payload(m: Member, every: int = 1) -> tuple[dict[str, str], list[Any], list[Any]]:
    """A member's tags, metrics (histories, then summary metrics) and params, as logged."""
    from mlflow.entities import Metric, Param

    tags = {KIND: "member", HASH: m.config_hash, STATUS: m.status, VERSION: m.version or __version__}
    if m.sweep is not None:
        tags[SWEEP] = m.sweep.name
    keep = kept_epochs(m.epoch, every)
    steps, ts = m.epoch[keep].tolist(), m.end_ms
    metrics = [Metric(k, v, ts, s) for k, y in m.losses.items() for s, v in zip(steps, y[keep].tolist())]
    metrics += [Metric(k, v, ts, s) for k, v, s in summary_metrics(m.epoch, m.losses)]
    return tags, metrics, [Param(k, v) for k, v in m.params.items()]


def sweep_params(overrides: Sequence[str]) -> list[Any]:
    """The sweep's overrides as params: `activation=gelu,relu` -> activation: gelu,relu."""
    from mlflow.entities import Param

    out: dict[str, str] = {}
    for text in overrides:
        key, _, value = text.partition("=")
        out[_BAD_KEY.sub("_", key.lstrip("+~"))[:250] or "override"] = value[:6000]
    return [Param(k, v) for k, v in out.items()]
