"""What the compiled engine keeps between processes, so that a process skips the fixed costs of
compiling: each compiled function saved whole by torch's `aot_compile` (its traced graph, guards and
inductor's generated code; the C++ libraries stay in inductor's cache), and the CPU probes inductor
runs before it picks a vector instruction set.

Measured (2026-11-26, 2-core AMD EPYC, torch 2.13 CPU, one thread, warm caches; docs/performance.md):
the first stack of the MNIST-1D classification grid (depth 2, batch 128; a step and two
evaluation shapes) took 4.0-4.6 s to prepare through torch.compile's caches, of which 1.0-1.7 s was
inductor's probes (a C++ build check, then a child Python that loads the library: six of them)
and about 1 s dynamo's tracing; each later stack 0.43-0.50 s, mostly tracing. Loaded instead:
1.8 s and 0.12-0.15 s, the same bits (tests/test_compile_store.py).

An artifact is found by a digest of everything that shapes its code (`identity`): the function's
role and the stack's configuration (activations, model, optimiser), its inputs' shapes, strides and
dtypes, the engine's source, inductor's settings, torch and Python versions, the thread count and
the CPU. A file that does not load (corrupt, truncated, another torch) is ignored: the function is
compiled again and the file rewritten. Files are written whole (a temporary file renamed), so a
reader never sees half of one. A graph aot_compile cannot take is compiled by torch.compile.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import platform
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from activation_bench.data.generated import write_atomic

MAGIC = b"actbench-aot-1\n"
ENGINE_DIR = Path(__file__).resolve().parent


def available() -> bool:
    """Whether this torch saves compiled functions (torch.compile(...).aot_compile, 2.10 or later)
    and inductor's caches are on (aot_compile refuses to run without them)."""
    if not hasattr(torch.compiler, "load_compiled_function"):
        return False
    import torch._inductor.config as inductor_config

    return not inductor_config.force_disable_caches


@functools.cache
def _machine() -> str:
    """The CPU as it decides the generated code: architecture, ATen's capability, model and flags."""
    model = flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key == "model name" and not model:
                    model = line.split(":", 1)[1].strip()
                elif key in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                if model and flags:
                    break
    except OSError:
        model = platform.processor()
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
    (as its own cache keys them: TORCHINDUCTOR_* variables change them), torch, Python, the thread
    count and the CPU."""
    import torch._inductor.config as inductor_config

    parts = {"role": role, "config": config, "args": _tensors(args), "engine": _engine_source(),
             "inductor": inductor_config.save_config_portable(),
             "torch": torch.__version__, "python": sys.version, "threads": torch.get_num_threads(),
             "grad": torch.is_grad_enabled(), "machine": _machine()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def folder(root: str) -> Path:
    return Path(root) / "aot"


def load(root: str, key: str, external: dict[str, Any]) -> Callable[..., Any] | None:
    """The compiled function saved under `key`, or None where there is none or it does not load."""
    try:
        data = (folder(root) / f"{key}.bin").read_bytes()
    except OSError:
        return None
    head, payload = data[: len(MAGIC) + 64], data[len(MAGIC) + 64:]
    if head != MAGIC + hashlib.sha256(payload).hexdigest().encode():
        return None  # truncated or corrupt
    try:
        from torch._guards import TracingContext, tracing

        # torch 2.13 rebuilds some guards through TracingContext.get(): loading outside a trace fails
        with tracing(TracingContext(None)):  # type: ignore[arg-type]
            return torch.compiler.load_compiled_function(io.BytesIO(payload), external_data=external)
    except Exception:  # noqa: BLE001 - another torch, Python or CPU, or a damaged file: compiled again
        return None


def compile_and_save(fn: Callable[..., Any], args: tuple, root: str, key: str,
                     external: dict[str, Any]) -> Callable[..., Any]:
    """fn compiled for these arguments by aot_compile (whole graph, static shapes), saved under
    `key` when it can be (a failure to save only costs the next process the compile)."""
    compiled = torch.compile(fn, fullgraph=True, dynamic=False).aot_compile((args, {}))
    try:
        from torch._dynamo.aot_compile import AOTCompiledFunction

        payload = AOTCompiledFunction.serialize(compiled, external).serialized_data
        _write(folder(root) / f"{key}.bin", MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
    except Exception:  # noqa: BLE001, S110 - unsaved: the next process compiles again
        pass
    return compiled


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: f.write(data))


class Shapes:
    """fn compiled once per shape of its last two arguments (a batch's inputs and targets: every
    other argument is the same tensors in every call), each loaded from compile_store where an
    earlier process saved it, else compiled by aot_compile (whole graph, static shapes) and saved.
    Where this torch cannot save compiled functions, or aot_compile fails on a graph: one
    torch.compile, whose guards pick the graph (the same code, so the same bits)."""

    def __init__(self, fn: Callable[..., Any], role: str, config: Mapping[str, Any], external: dict[str, Any],
                 root: str) -> None:
        self.fn, self.role, self.config, self.external, self.root = fn, role, config, external, root
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
            loaded = load(self.root, key, self.external)
            if loaded is not None:
                try:
                    out = loaded(*args)
                    self.by_shape[shape] = loaded
                    return out
                except Exception:  # noqa: BLE001 - compiled again below
                    if not trial:
                        raise
            try:
                fn: Callable[..., Any] | None = compile_and_save(self.fn, args, self.root, key, self.external)
                out = fn(*args) if trial else None  # type: ignore[misc]
            except Exception:  # noqa: BLE001 - aot_compile failed on this graph (or its check): torch.compile
                fn = None
            if fn is not None:
                self.by_shape[shape] = fn
                return out if trial else fn(*args)
        if self.whole is None:
            self.whole = torch.compile(self.fn, fullgraph=True, dynamic=False)
        self.by_shape[shape] = self.whole
        return self.whole(*args)


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
