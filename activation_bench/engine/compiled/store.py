"""What the compiled engine keeps between processes, so that a process skips the fixed costs of
compiling: each compiled function as an AOTInductor package (the function traced to ATen
operations, exported, and compiled by inductor into one C++ library with its own C++ wrapper),
run through torch's C++ loader, `torch._C._aoti.AOTIModelPackageLoader`. Loading a package imports
neither torch._dynamo nor inductor: a process that finds its functions saved pays for `import
torch` and nothing more.

Measured (2026-11-26, 2-core AMD EPYC, torch 2.13 CPU, two threads, warm store; docs/performance.md):
the peer grid's two 240-member stacks load in milliseconds where `aot_compile`'s saved functions
took 1.8-1.9 s (1.3-1.4 s of it importing torch._dynamo, which loading them needs), and a
1000-epoch sweep of them trains in 1.7-1.8 s in process against 3.8 s. A cold compile costs 7-12 s
a step and 6-7 s an evaluation (each package builds its own library).

A function is first traced by make_fx (fake tensors; it follows torch.func.vjp, which export
alone cannot trace), then exported and compiled for its arguments' shapes. The process that
compiles a package runs it through the same loader as every later process, so the bits do not
depend on whether the store was warm or empty (tests/test_compile_store.py).

An artifact is found by a digest of everything that shapes its code (`identity`): the function's
role and the stack's configuration (activations, model, optimiser), its inputs' shapes, strides and
dtypes, the engine's source, inductor's settings (the environment variables it reads them from,
TORCHINDUCTOR_*, AOT_INDUCTOR_* and a few more: importing inductor's config to read them would cost
the second a loaded process saves), torch and Python
versions, the thread count and the CPU. A package is written whole under a temporary name and
renamed to `<digest>-<sha256 of its bytes>.pt2`, so a reader never sees half of one and a file
whose bytes no longer match its name (truncated, damaged) is not loaded: it is compiled again.
Where this torch has no AOTInductor loader, or a graph cannot be exported or compiled ahead of
time, one torch.compile serves the function (not saved; its numbers agree with a package's to rounding).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from activation_bench.data.cache import write_atomic
from activation_bench.host import cpu_info

NAME_HASH = 16  # hex digits of the package's sha256 in its file name
# the environment variables torch 2.13's inductor and dynamo read their settings from
# (torch/_inductor/config.py: TORCHINDUCTOR_*, and AOT_INDUCTOR_* / AOTINDUCTOR_* for ahead-of-time builds)
SETTINGS = ("TORCHINDUCTOR_", "AOT_INDUCTOR_", "AOTINDUCTOR_", "TORCHDYNAMO_", "TORCH_COMPILE_")
ENGINE_DIR = Path(__file__).resolve().parent


def available() -> bool:
    """Whether this torch loads AOTInductor packages (torch._C._aoti.AOTIModelPackageLoader)."""
    aoti = getattr(torch._C, "_aoti", None)
    return aoti is not None and hasattr(aoti, "AOTIModelPackageLoader")


@functools.cache
def _machine() -> str:
    """The CPU as it decides the generated code: architecture, ATen's capability, model and flags."""
    model, flags = cpu_info()
    return f"{platform.machine()}|{torch.backends.cpu.get_cpu_capability()}|{model}|{flags}"


@functools.cache
def _engine_source() -> str:
    """A digest of the engine's source: any edit of the code that builds the functions is a new key."""
    h = hashlib.sha256()
    for path in sorted(ENGINE_DIR.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _tensors(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [(tuple(value.shape), value.stride(), str(value.dtype), str(value.device), value.requires_grad)]
    if isinstance(value, (list, tuple)):
        return [len(value), *(t for v in value for t in _tensors(v))]
    return [repr(value)]


def identity(role: str, config: Mapping[str, Any], args: tuple) -> str:
    """The digest that names one compiled function: its role and configuration (plain data),
    its arguments' tensors (shape, stride, dtype, device), the engine's source, inductor's settings
    (the environment variables it reads, SETTINGS, but the cache folder's), torch, Python, the
    thread count and the CPU."""
    inductor = sorted((k, v) for k, v in os.environ.items()
                      if k.startswith(SETTINGS) and k != "TORCHINDUCTOR_CACHE_DIR")  # where, not what
    parts = {"role": role, "config": config, "args": _tensors(args), "engine": _engine_source(),
             "inductor": inductor, "torch": torch.__version__, "python": sys.version,
             "threads": torch.get_num_threads(), "grad": torch.is_grad_enabled(), "machine": _machine()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def folder(root: str) -> Path:
    return Path(root) / "aoti"


def load(root: str, key: str) -> Callable[..., Any] | None:
    """The function saved under `key`, or None where there is none or none that loads: a file
    whose bytes do not match the hash in its name is passed over."""
    for path in sorted(folder(root).glob(f"{key}-*.pt2")):
        try:
            intact = hashlib.sha256(path.read_bytes()).hexdigest()[:NAME_HASH] == path.stem.rsplit("-", 1)[1]
        except OSError:
            continue
        if intact:
            try:
                return _loaded(path)
            except Exception:  # noqa: BLE001, S112 - another torch or CPU, or damaged inside: the next, else compiled again
                continue
    return None


def _loaded(path: Path) -> Callable[..., Any]:
    """A package as a function of the arguments it was compiled for (any nesting of lists and
    tuples of tensors), returning what the function returned (its outputs' nesting kept)."""
    loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
    out_spec = pytree.treespec_loads(loader.get_call_spec()[1])

    def run(*args: Any) -> Any:
        return pytree.tree_unflatten(loader.run(pytree.tree_leaves(args)), out_spec)
    return run


class _Traced(torch.nn.Module):
    """What torch.export takes: a module whose forward is the traced function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def compile_and_save(fn: Callable[..., Any], args: tuple, root: str, key: str) -> Callable[..., Any]:
    """fn compiled ahead of time for these arguments (static shapes), saved under `key` and loaded
    back: the caller runs the same package a later process loads. Raises where it cannot."""
    import torch._inductor as inductor
    from torch.fx.experimental.proxy_tensor import make_fx

    prepare_compiler(root)
    out = folder(root)
    out.mkdir(parents=True, exist_ok=True)
    temporary = out / f".{key}.{os.getpid()}.pt2"
    try:
        with warnings.catch_warnings():  # torch's own deprecation notices from inside export, not the user's
            warnings.simplefilter("ignore", FutureWarning)
            graph = make_fx(fn, tracing_mode="fake")(*args)  # ATen operations: torch.func.vjp traced through
            program = torch.export.export(_Traced(graph), tuple(args), strict=False)
            inductor.aoti_compile_and_package(program, package_path=str(temporary))
        digest = hashlib.sha256(temporary.read_bytes()).hexdigest()[:NAME_HASH]
        final = out / f"{key}-{digest}.pt2"
        os.replace(temporary, final)
    finally:
        temporary.unlink(missing_ok=True)
    return _loaded(final)


def prepare_compiler(root: str) -> None:
    """Before anything compiles in this process: room for one torch.compile graph per stack
    shape (where a function falls back to it), and inductor's CPU probes remembered."""
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 512))
    if hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):  # an error (so eager), not a silent eager run
        torch._dynamo.config.fail_on_recompile_limit_hit = True
    remember_isa_probes(root)


class NotSaved(Exception):
    """A function asked for from the store only (engine=auto below its threshold) is not saved there."""


class Shapes:
    """fn compiled once per shape of its last two arguments (a batch's inputs and targets: every
    other argument is the same tensors in every call), each loaded from the store where an earlier
    process saved it, else compiled ahead of time and saved. Where this torch cannot load
    packages, or a graph cannot be compiled ahead of time: one torch.compile, whose guards pick
    the graph. With saved_only, a shape checked before training (`check`) that is not saved (or
    does not load) raises NotSaved instead of compiling."""

    def __init__(self, fn: Callable[..., Any], role: str, config: Mapping[str, Any], root: str,
                 notice: Callable[[str], None] | None = None, saved_only: bool = False) -> None:
        self.fn, self.role, self.config, self.root = fn, role, config, root
        self.saved_only = saved_only
        self.notice = notice  # a line before and after each compilation (a cold one takes seconds)
        self.announced: set[tuple] = set()  # shapes said (once: torch.compile after a failed package is not new)
        self.by_shape: dict[tuple, Callable[..., Any]] = {}
        self.saving = available()
        self.whole: Callable[..., Any] | None = None

    def check(self, *args: Any) -> Any:
        """Compile (or load) for these arguments and run once on them (copies: they are changed).
        A loaded function that fails is compiled again; a compilation that fails raises."""
        return self._obtain(args, trial=True)

    def __call__(self, *args: Any) -> Any:
        fn = self.by_shape.get((args[-2].shape, args[-1].shape))
        if fn is None:  # a shape build() did not see: compiled now, as torch.compile would
            return self._obtain(args, trial=False)
        return fn(*args)

    def _obtain(self, args: tuple, trial: bool) -> Any:
        shape = (args[-2].shape, args[-1].shape)
        if self.saving:
            key = identity(self.role, self.config, args)
            loaded = load(self.root, key)
            if loaded is not None:
                try:
                    out = loaded(*args)
                    self.by_shape[shape] = loaded
                    return out
                except Exception:  # noqa: BLE001 - compiled again below
                    if not trial:
                        raise
        if self.saved_only and trial:
            raise NotSaved(f"the {self.role} for inputs of shape {'x'.join(map(str, shape[0]))}")
        if self.saving:
            try:
                with self._announced(shape, saved=True):
                    fn: Callable[..., Any] | None = compile_and_save(self.fn, args, self.root, key)
                out = fn(*args) if trial else None  # type: ignore[misc]
            except Exception:  # noqa: BLE001 - not compilable ahead of time (or its check failed): torch.compile
                fn = None
            if fn is not None:
                self.by_shape[shape] = fn
                return out if trial else fn(*args)
        if self.whole is None:
            prepare_compiler(self.root)
            self.whole = torch.compile(self.fn, fullgraph=True, dynamic=False)
        self.by_shape[shape] = self.whole
        with self._announced(shape, saved=False):  # torch.compile compiles at its first call of a shape
            return self.whole(*args)

    @contextlib.contextmanager
    def _announced(self, shape: tuple, saved: bool) -> Iterator[None]:
        """A cold compilation said out loud: a line as it starts (what, and how often: a package saved
        for later processes, or torch.compile's for this one) and one with its seconds as it ends
        (none where it fails: the caller says what follows), through `notice` where one was given,
        once per shape."""
        if self.notice is None or shape in self.announced:
            yield
            return
        self.announced.add(shape)
        rows = "x".join(str(n) for n in shape[0])
        how = (f"once per shape on this machine; saved in {folder(self.root)} for later runs" if saved
               else "torch.compile: once per shape in this process, not saved")
        self.notice(f"compiling the {self.role} for inputs of shape {rows} ({how})")
        start = time.perf_counter()
        yield
        self.notice(f"compiled the {self.role} in {time.perf_counter() - start:.1f} s")


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: f.write(data))


def remember_isa_probes(root: str) -> None:
    """Inductor checks each vector instruction set the CPU reports by building a small library and
    loading it in a child Python (0.1-0.3 s each, five on this AMD EPYC: 1.0-1.7 s of every
    process). A load that succeeded is remembered here, by the library's path, size and time, the
    CPU, torch and the Python executable, so later processes skip the child; one that failed is
    probed again. The choice of instruction set, and so the code, is the same as with the probe."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return
    probe = getattr(cpu_vec_isa.VecISA, "_probe_load", None)
    if probe is None or getattr(probe, "remembered", False):
        return

    def mark(output_path: str) -> Path | None:
        try:
            st = os.stat(output_path)
        except OSError:
            return None
        text = "|".join([output_path, str(st.st_size), str(st.st_mtime_ns), _machine(), torch.__version__,
                         sys.executable])
        return folder(root) / "probes" / hashlib.sha256(text.encode()).hexdigest()

    def remembered(self: Any, output_path: str) -> bool:
        done = mark(output_path)
        if done is not None and done.exists():
            return True
        ok = probe(self, output_path)
        if ok and done is not None:
            try:
                _write(done, b"")
            except OSError:
                pass
        return ok

    remembered.remembered = True  # type: ignore[attr-defined]
    cpu_vec_isa.VecISA._probe_load = remembered
