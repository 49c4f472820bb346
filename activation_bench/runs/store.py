"""Run directories and their files: names, atomic writes, completion markers.

A run directory is written whole into a hidden temporary directory beside its final place and
renamed into place, so a crash never leaves a run that looks complete. Inside it, `summary.json`
carries the completion marker (`status`: complete or diverged); a directory without it is
incomplete. Its files are on disk before the rename (one file-system flush per batch of runs);
files outside run directories (sweep.yaml, results.csv, exported tables and figures) are written
atomically on their own through `atomic_file` (temporary file, flush, fsync, rename).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import sys
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from activation_bench.cfg import activation_label
from activation_bench.errors import UsageError
from activation_bench.runs.contents import (
    COLUMNS,
    TEST_WINDOWS,
    grads_csv,
    losses_csv,
    preact_csv,
    ran_config,
    saved_yaml,
    summary,
    test_windows_csv,
)

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg
    from activation_bench.engine.train import RunResult

    RunItem = tuple[Path, Cfg, RunResult, str, dict[str, str] | None]  # final, cfg, result, config hash, labels

DONE_STATUSES = ("complete", "diverged")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=,-]+")


# ---------------------------------------------------------------------------------------------
# atomic files: every file outside a run directory (sweep.yaml, results.csv, exported tables,
# figures) is written through atomic_file


def atomic_write(path: Path, text: str | Iterable[str]) -> None:
    """Write text (or pieces of text) to path atomically (see atomic_file)."""
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text) if isinstance(text, str) else fh.writelines(text)


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temporary path in path's folder to write to; once the block succeeds the file is flushed
    to disk (fdatasync) and renamed to path, so path is never half a file. The temporary file is
    removed whatever happens; an OSError becomes one line (UsageError)."""
    check_folder(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            _datasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def check_folder(path: Path) -> None:
    """The folder a file is to be written into must exist (checked before any work is done)."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{path}: folder {parent} does not exist")


def _datasync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)  # macOS has no fdatasync


def slug(text: str, limit: int = 80) -> str:
    """A filesystem-safe version of text (no separators, no leading dots)."""
    out = _UNSAFE.sub("_", text).strip("._")
    return out[:limit] or "run"


def check_name(name: str) -> str:
    """A user-given run or sweep name: one path component, nothing that escapes the runs root."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise UsageError(f"invalid name '{name}': use one plain directory name (no '/' or '..')")
    if name.startswith("."):
        raise UsageError(f"invalid name '{name}': names may not start with '.'")
    if slug(name, 200) != name:
        raise UsageError(f"invalid name '{name}': use letters, digits and . _ + = , - only")
    return name


def inside(root: Path, path: Path) -> Path:
    """Resolve path and refuse anything outside root."""
    root_r, path_r = root.resolve(), path.resolve()
    if path_r != root_r and root_r not in path_r.parents:
        raise UsageError(f"refusing to write outside the runs directory: {path}")
    return path_r


def default_run_name(cfg: Cfg) -> str:
    act = activation_label(cfg.activation)
    if cfg.activation.get("_target_"):
        act = act.rsplit(".")[-1]
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return slug(f"{stamp}_{act}_{cfg.data.name}_s{cfg.seed}")


def unique_dir(root: Path, name: str) -> Path:
    """root/name, or root/name-2, -3, ... when taken."""
    path = root / name
    k = 2
    while path.exists():
        path = root / f"{name}-{k}"
        k += 1
    return path


def ensure_root(root: Path) -> Path:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create runs directory {root}: {exc.strerror or exc}") from None
    if not os.access(root, os.W_OK):
        raise UsageError(f"runs directory {root} is not writable")
    return root


def write_run(final: Path, cfg: Cfg, result: RunResult, cfg_hash: str, labels: dict[str, str] | None = None,
              replace: bool = False, unique: bool = False) -> Path:
    """Write one run directory: config.yaml, losses.csv and summary.json, atomically (see
    `write_runs`). Returns the directory the run ended up in.

    - an incomplete directory at `final` (a run killed earlier) is replaced;
    - a finished one is replaced only with `replace` (--force); if it holds this very config
      (another process finished the same member first), the new copy is dropped;
    - with `unique` (single runs), a name taken in the meantime moves on to name-2, name-3, ...
    """
    return write_runs([(final, cfg, result, cfg_hash, labels)], replace=replace, unique=unique)[0]


def write_runs(items: Sequence[RunItem], replace: bool = False,
               unique: bool = False, threads: int = 8, processes: int = 1) -> list[Path]:
    """Write several run directories, each (final, cfg, result, cfg_hash, labels), atomically.

    Each run's files go into a hidden temporary directory beside its final place; then one flush
    of the file system puts them all on disk, and only then is each directory renamed into place
    (and the parents' entries flushed). So a run directory under its final name is whole even after
    a power loss, and a batch of runs costs one disk flush instead of four per run. A large batch
    is formatted by up to `processes` processes (see `_stage_split`).
    """
    tmps = [final.with_name(f".{final.name}.tmp-{os.getpid()}") for final, *_ in items]
    roots = {final.parent for final, *_ in items}  # a run moved to name-2 stays in its parent
    try:
        work = list(zip(tmps, items))
        _stage_split(work, threads, _writers(items, processes))
        for root in roots:
            _sync_filesystem(root)
        out = [_move_into_place(tmp, final, cfg_hash, replace, unique)
               for tmp, (final, _, _, cfg_hash, _) in zip(tmps, items)]
        for root in roots:
            _fsync_dir(root)
        return out
    finally:
        for tmp in tmps:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


# losses per writer process at least: a run's files cost formatting (0.1-0.6 us a float) and the
# kernel's file creation; 240 runs of 1000 epochs (240,000 losses) took 0.22-0.26 s in one process
# and 0.15-0.18 s in two (2026-11-27, 2-core AMD EPYC), and a fork of a process holding torch ~6 ms
_FLOATS_PER_WRITER = 100_000


def _writers(items: Sequence[RunItem], processes: int) -> int:
    """How many processes format this batch: one per _FLOATS_PER_WRITER floats of losses, at most
    `processes`; one off Linux (Windows has no fork, and macOS's system libraries do not promise
    that a forked child of a threaded process may run)."""
    if processes <= 1 or not sys.platform.startswith("linux"):
        return 1
    floats = sum(len(v) for _, _, result, _, _ in items
                 for c in COLUMNS if (v := getattr(result, c, None)) is not None)
    return max(1, min(processes, floats // _FLOATS_PER_WRITER, len(items)))


def _stage_split(work: list[tuple[Path, RunItem]], threads: int, writers: int) -> None:
    """Stage every run of work (its hidden directory, its files), in `writers` processes.

    Formatting the files is Python, held to one core by the GIL: 240 runs of 3000 epochs took
    0.34-0.39 s here in one process and 0.20-0.23 s in two (0.61-0.66 and 0.36-0.45 s before
    contents.reprs; docs/performance.md). The other
    processes are forked children, each staging every writers-th run (so long and short runs
    spread evenly) and reporting a failure's one line through a pipe; this process stages the
    rest, waits for them, and alone flushes and renames. Children never call into torch.
    """
    children: list[tuple[int, int]] = []
    try:
        for k in range(1, writers):
            try:
                pid, read_end, write_end = _fork_writer()
            except OSError:  # no process or pipe to be had: this process stages the rest
                break
            if pid == 0:  # the child: stage its share, exit without running the parent's cleanup
                os.close(read_end)
                code = 0
                try:
                    _stage_all(work[k::writers], threads)
                except BaseException as exc:  # noqa: BLE001 - every failure goes back as one line
                    os.write(write_end, (str(exc) or type(exc).__name__).encode()[:4000])
                    code = 1
                os._exit(code)
            os.close(write_end)
            children.append((pid, read_end))
        mine = [0, *range(len(children) + 1, writers)]  # shares no child took
        _stage_all([w for k in mine for w in work[k::writers]], threads)
    finally:
        errors = [_reap(pid, read_end) for pid, read_end in children]
    if failed := next((e for e in errors if e is not None), None):
        raise UsageError(failed)


def _fork_writer() -> tuple[int, int, int]:
    """(pid as os.fork returns it, the pipe's read end, its write end)."""
    read_end, write_end = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns that forking a process with threads (torch's idle OpenMP workers)
            # may deadlock a child that takes a lock one of them held; this child takes none of
            # theirs (it formats text and writes files, never calls torch)
            warnings.simplefilter("ignore", DeprecationWarning)
            return os.fork(), read_end, write_end
    except OSError:
        os.close(read_end)
        os.close(write_end)
        raise


def _reap(pid: int, read_end: int) -> str | None:
    """Wait for a writer child; its failure's line, or None when it succeeded."""
    with os.fdopen(read_end, "rb") as fh:
        message = fh.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return None
    return message or f"a process writing run directories failed (exit status {status})"


def _stage_all(work: Sequence[tuple[Path, RunItem]], threads: int) -> None:
    """Stage each run: this thread formats each run's files while a pool's threads create and
    write the previous runs' (system calls, which release the GIL): formatting in the pool's
    threads made them queue for the GIL (480 runs of 1000 epochs: 0.61-0.90 s, so 0.54-0.76 s;
    docs/performance.md). A bounded window of runs in flight keeps a large sweep's texts from
    piling up in memory when the disk is slower."""
    workers = max(1, min(threads, len(work)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[None]] = deque()
        for tmp, (final, cfg, result, cfg_hash, labels) in work:
            pending.append(pool.submit(_stage, tmp, final, _texts(cfg, result, cfg_hash, labels)))
            if len(pending) > 4 * workers:
                pending.popleft().result()
        for future in pending:
            future.result()


def _texts(cfg: Cfg, result: RunResult, cfg_hash: str, labels: dict[str, str] | None) -> list[tuple[str, str]]:
    """A run directory's files, (name, text) each."""
    files = [
        ("config.yaml", saved_yaml(ran_config(cfg, result))),
        ("losses.csv", losses_csv({c: v for c in COLUMNS if (v := getattr(result, c, None)) is not None})),
        ("summary.json", json.dumps(summary(cfg, result, cfg_hash, labels), indent=2) + "\n"),
    ]
    if getattr(result, "grads", None) is not None:
        files.insert(2, ("grads.csv", grads_csv(result.grads)))
    if getattr(result, "preact", None) is not None:
        files.insert(2, ("preact.csv", preact_csv(result.preact)))
    if getattr(result, "test_items", None) is not None:  # a text's whole test split, per window
        files.insert(2, (TEST_WINDOWS, test_windows_csv(result.test_items)))
    return files


def _stage(tmp: Path, final: Path, files: list[tuple[str, str]]) -> None:
    """The run's files in its hidden temporary directory tmp (written, not yet flushed)."""
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"cannot create {tmp}: {exc.strerror or exc}") from None
    # the hidden directory is the unit of atomicity: its files need no temporary names
    for name, text in files:
        try:
            with open(tmp / name, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {final / name}: {exc.strerror or exc}") from None


def _sync_filesystem(path: Path) -> None:
    """Flush everything written to the file system holding path: Linux's syncfs, os.sync elsewhere."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            _syncfs(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise UsageError(f"cannot write to {path}: {exc.strerror or exc}") from None


def _syncfs(fd: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    else:
        os.sync()


def _move_into_place(tmp: Path, final: Path, cfg_hash: str, replace: bool, unique: bool) -> Path:
    root, name, k = final.parent, final.name, 2
    while True:
        old = None
        if final.exists():
            done = finished_summary(final)
            if done and unique:
                final, k = root / f"{name}-{k}", k + 1
                continue
            if done and not replace:
                if done.get("config_hash") == cfg_hash:
                    return final  # finished meanwhile by a concurrent process: keep that one
                raise UsageError(f"{final} already holds a different finished run")
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            try:
                os.replace(final, old)
            except OSError as exc:
                raise UsageError(f"cannot replace {final}: {exc.strerror or exc}") from None
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if unique and final.exists():
                continue  # lost a race for the name: try the next one
            raise UsageError(f"cannot move run into {final}: {exc.strerror or exc}") from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return final


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_summary(run_dir: Path) -> dict | None:
    try:
        data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def finished_summary(run_dir: Path) -> dict | None:
    """summary.json if the run finished (complete or diverged), else None: the completion check."""
    s = read_summary(run_dir)
    return s if s and s.get("status") in DONE_STATUSES else None


def is_done(run_dir: Path) -> bool:
    return finished_summary(run_dir) is not None


def clean_stale_temps(root: Path) -> int:
    """Remove temporary run directories left by processes that no longer exist."""
    removed = 0
    for p in [*root.glob(".*.tmp-*"), *root.glob(".*.old-*")]:
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock (fcntl.flock) on path, for files several processes share."""
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
