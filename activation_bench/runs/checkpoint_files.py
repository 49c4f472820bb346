"""Mid-run checkpoints on disk, and the signals that ask for one.

A training stack's checkpoint is one file, `<root>/.checkpoints/<id>.ckpt` (root: the sweep's
directory, or the runs directory for `actbench run`; id: a hash of the members' config hashes):

    ACTBENCH-CHECKPOINT 1\\n
    {"sha256": ..., "bytes": N, "members": [config hashes, in stack order], "epoch": E, ...}\\n
    N bytes: torch.save of engine/resume.py's state

It is written to a temporary name, flushed (fsync), the previous checkpoint renamed to
`<id>.prev.ckpt` and the new one renamed into place, then the folder flushed: at every moment one
whole checkpoint is on disk. A file whose payload fails its checksum, or that belongs to other
members, is never used (one line says so; the previous one is tried, else the stack starts over).
Both are removed once the stack's run directories are written.

Signals (`handling_signals`): the first SIGTERM, SIGINT or SIGUSR2 lets the current step finish,
writes the checkpoint and stops (`Preempted`; exit 128 + the signal's number); a second SIGINT
stops at once (KeyboardInterrupt). Under submitit (a Hydra submitit launcher's job), SIGUSR2 is
submitit's preemption and timeout signal: after the checkpoint its own handler requeues the job;
a SIGTERM there writes a checkpoint and training goes on (submitit ignores it too: clusters send
it before the real signal).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from activation_bench.engine.resume import Preempted
from activation_bench.errors import UsageError
from activation_bench.host import cpu_model, torch_threads

MAGIC = b"ACTBENCH-CHECKPOINT 1\n"
FOLDER = ".checkpoints"
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
# testing and the soak script: "TERM@E" sends SIGTERM to this process after epoch E of a stack that
# did not resume (E.S: after step S of epoch E+1); KILL sends SIGKILL, USR2 submitit's signal
SIGNAL_AT_ENV = "ACTBENCH_SIGNAL_AT"
TRACE_ENV = "ACTBENCH_CHECKPOINT_TRACE"  # a file: one JSON line per epoch, save and resume


class Damaged(Exception):  # noqa: N818
    """A checkpoint file that must not be used (the message says why)."""


# ---------------------------------------------------------------------------------------------
# signals


class Signals:
    """The signal state of this process: `stop` once a signal asked training to stop,
    `save_now` when one asked for a checkpoint only."""

    def __init__(self) -> None:
        self.stop: int | None = None
        self.save_now = False
        self.previous: dict[int, Any] = {}
        self.submitit = False

    def handler(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and self.stop is not None:
            raise KeyboardInterrupt  # the second interrupt: at once
        if self.submitit and signum == signal.SIGTERM:
            self.save_now = True
            return
        self.stop = signum

    def check(self) -> None:
        """Between stacks: stop here if a signal asked to (nothing is training)."""
        if self.stop is not None:
            raise Preempted(self.stop)


SIGNAL_STATE = Signals()


@contextlib.contextmanager
def handling_signals(submitit: bool = False) -> Iterator[Signals]:
    """SIGTERM, SIGINT and SIGUSR2 ask training to checkpoint and stop, within the block (main
    thread only; elsewhere signals keep their handlers)."""
    state = SIGNAL_STATE
    state.stop, state.save_now, state.submitit = None, False, submitit
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    state.previous = {s: signal.signal(s, state.handler) for s in SIGNALS}
    try:
        yield state
    finally:
        for s, h in state.previous.items():
            signal.signal(s, h)
        state.stop, state.save_now = None, False


def exit_code(signum: int) -> int:
    """The shell's code for a process a signal ended: 128 + its number (SIGTERM 143, SIGINT 130)."""
    return 128 + signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def requeue_under_submitit(signum: int) -> None:
    """In a submitit job stopped by its signal: call submitit's own handler, which requeues the job
    (Hydra's launcher resubmits the same job, which resumes from the checkpoint) and exits."""
    prev = SIGNAL_STATE.previous.get(signum)
    if callable(prev):
        prev(signum, None)


# ---------------------------------------------------------------------------------------------
# files


def folder(root: Path) -> Path:
    return root / FOLDER


def stack_id(hashes: Sequence[str]) -> str:
    """The checkpoint's name for these members (in any order)."""
    return hashlib.sha256(",".join(sorted(hashes)).encode()).hexdigest()[:16]


def write(path: Path, state: dict[str, Any], header: dict[str, Any]) -> None:
    """Write a checkpoint atomically (module docstring); an OSError becomes one line (UsageError)
    and leaves the previous checkpoint as it was."""
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    head = {**header, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n")
            fh.write(data)
            fh.flush()
            _sync(fh.fileno())
        if path.exists():
            os.replace(path, previous(path))
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        raise UsageError(f"cannot write checkpoint {path}: {exc.strerror or exc}; the previous one is kept") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _sync(fd: int) -> None:
    os.fsync(fd)


def previous(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".ckpt") + ".prev.ckpt")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_header(path: Path) -> dict[str, Any]:
    """The header line of a checkpoint (raises Damaged)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(len(MAGIC)) != MAGIC:
                raise Damaged("not a checkpoint of this format")
            head = json.loads(fh.readline(1 << 20))
    except (OSError, ValueError) as exc:
        raise Damaged(f"unreadable ({exc})") from None
    if not isinstance(head, dict) or not isinstance(head.get("members"), list):
        raise Damaged("its header is damaged")
    return head


def read(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, state) of a checkpoint whose payload matches its checksum (raises Damaged)."""
    import torch

    head = read_header(path)
    try:
        with open(path, "rb") as fh:
            fh.readline()
            fh.readline()
            data = fh.read()
    except OSError as exc:
        raise Damaged(f"unreadable ({exc.strerror or exc})") from None
    if len(data) != head.get("bytes") or hashlib.sha256(data).hexdigest() != head.get("sha256"):
        raise Damaged("it fails its checksum (a write cut short or a damaged disk)")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read it back means: not used
        raise Damaged(f"unreadable ({type(exc).__name__})") from None
    return head, state


def saved_stacks(root: Path) -> dict[Path, list[str]]:
    """Every stack with a checkpoint under root (its path) -> its members' config hashes, in the
    stack's order (from the newest readable header)."""
    out: dict[Path, list[str]] = {}
    base = folder(root)
    if not base.is_dir():
        return out
    ids = sorted({p.name.removesuffix(".ckpt").removesuffix(".prev") for p in base.glob("*.ckpt")
                  if not p.name.startswith(".")})
    for name in ids:
        path = base / f"{name}.ckpt"
        for candidate in (path, previous(path)):
            with contextlib.suppress(Damaged):
                out[path] = [str(h) for h in read_header(candidate)["members"]]
                break
    return out


def remove(path: Path) -> None:
    """A stack's checkpoints (once its run directories are written), and the folder left empty."""
    for p in (path, previous(path)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def clean_stale(root: Path) -> None:
    """Temporary checkpoint files of processes that no longer exist."""
    from activation_bench.runs import store

    if folder(root).is_dir():
        store.clean_stale_temps(folder(root))


# ---------------------------------------------------------------------------------------------
# one stack's checkpoints: the engine's Hooks


class StackCheckpoints:
    """The engine's checkpoint hooks (engine/resume.Hooks) for one stack of members."""

    def __init__(self, root: Path, hashes: Sequence[str], settings: Any, notice: Callable[[str], None],
                 label: str = "stack") -> None:
        self.path = folder(root) / f"{stack_id(hashes)}.ckpt"
        self.hashes, self.notice, self.label = list(hashes), notice, label
        self.seconds = float(settings.get("seconds", 300.0) or 0.0) if settings is not None else 300.0
        self.every = int(settings.get("every", 0) or 0) if settings is not None else 0
        self.last = time.perf_counter()
        self.resumed = False
        self.damaged = False  # the latest checkpoint failed its check: the next save does not keep it
        self.saves = 0
        self.trigger = _signal_at()
        self.trace = os.environ.get(TRACE_ENV)

    def load(self) -> dict[str, Any] | None:
        for path in (self.path, previous(self.path)):
            if not path.exists():
                continue
            try:
                head, state = read(path)
            except Damaged as why:
                self.notice(f"checkpoint {path} not used: {why}")
                self.damaged |= path == self.path
                continue
            if list(head["members"]) != self.hashes:
                self.notice(f"checkpoint {path} not used: it holds other members (config hashes differ)")
                continue
            if head.get("versions") != _versions():
                self.notice(f"checkpoint {path} not used: written by other versions ({head.get('versions')}), "
                            "which need not continue bit for bit")
                continue
            if head.get("machine") != machine():
                self.notice(f"checkpoint {path} not used: written {_machine_text(head.get('machine'))}, this "
                            f"process runs {_machine_text(machine())}; it need not continue bit for bit there")
                continue
            self.resumed = True
            self.notice(f"resuming {self.label} from checkpoint {path.name} at epoch {head.get('epoch')}"
                        f"/{head.get('epochs')}" + (f" (step {head['step']})" if head.get("step") else ""))
            self._trace({"event": "resume", "epoch": head.get("epoch"), "step": head.get("step")})
            return state
        return None

    def reject(self, why: str) -> None:
        self.resumed = False
        self.notice(f"checkpoint {self.path} not used: {why}; starting over")

    def due(self, epoch: int, step: int) -> bool:
        if self.trace and not step:
            self._trace({"event": "epoch", "epoch": epoch})
        if self.trigger is not None and not self.resumed and self.trigger[1:] == (epoch, step or None):
            sig, self.trigger = self.trigger[0], None
            os.kill(os.getpid(), sig)  # ACTBENCH_SIGNAL_AT: delivered before os.kill returns
        state = SIGNAL_STATE
        if state.stop is not None or state.save_now:
            return True
        if not step and self.every and epoch % self.every == 0:
            return True
        return bool(self.seconds) and time.perf_counter() - self.last >= self.seconds

    def save(self, state: dict[str, Any]) -> None:
        start = time.perf_counter()
        header = {"members": self.hashes, "epoch": state["epoch"], "step": state["step"], "epochs": state["epochs"],
                  "engine": state["engine"], "versions": _versions(), "machine": machine()}
        if self.damaged:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()  # the previous checkpoint, whole, stays the fallback
            self.damaged = False
        write(self.path, state, header)
        asked, SIGNAL_STATE.save_now = SIGNAL_STATE.save_now, False
        self.saves += 1
        self.last = time.perf_counter()
        self._trace({"event": "save", "epoch": state["epoch"], "step": state["step"], "seconds": self.last - start})
        if asked and SIGNAL_STATE.stop is None:
            # under submitit: a SLURM requeue, preemption or scancel; SLURM kills the job after KillWait
            self.notice(f"SIGTERM: checkpoint written at epoch {state['epoch']}/{state['epochs']}; training goes on "
                        "until the job is stopped (submitit)")

    def stop(self) -> int | None:
        return SIGNAL_STATE.stop

    def remove(self) -> None:
        remove(self.path)

    def _trace(self, event: dict[str, Any]) -> None:
        if self.trace:
            with open(self.trace, "a") as fh:
                fh.write(json.dumps({"pid": os.getpid(), "stack": self.path.stem, **event}) + "\n")


def _versions() -> dict[str, str]:
    """Python's, torch's and activation_bench's versions: a checkpoint continues only under its own."""
    from activation_bench.runs.contents import versions

    return dict(versions())


def machine() -> dict[str, Any]:
    """The CPU model and torch's thread count: a CPU checkpoint continues bit for bit only under both
    (docs/reproducibility.md). `OMP_NUM_THREADS` sets the count."""
    import torch

    return {"cpu": cpu_model(), "threads": torch.get_num_threads()}


def _machine_text(recorded: Any) -> str:
    if not isinstance(recorded, dict):
        return "by an unrecorded machine"
    return f"on {recorded.get('cpu')} at {torch_threads(recorded.get('threads'))}"


def _signal_at() -> tuple[int, int, int | None] | None:
    """ACTBENCH_SIGNAL_AT parsed: (signal, epoch, step or None)."""
    text = os.environ.get(SIGNAL_AT_ENV)
    if not text:
        return None
    name, _, at = text.partition("@")
    epoch, _, step = at.partition(".")
    return getattr(signal, "SIG" + name.upper()), int(epoch), int(step) if step else None
