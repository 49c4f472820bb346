"""engine=compiled's functions kept between processes (engine/compiled/store.py): the digest that
names a package, damaged files passed over, inductor's remembered CPU probes, and (slow: they
compile) the same bits from a package just compiled, loaded by a later stack and compiled again
over a damaged file, within rounding of torch.compile's, and a loading process that imports
neither dynamo nor inductor."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from activation_bench.config.compose import compose_many
from activation_bench.config.grid import expand
from activation_bench.engine import train
from activation_bench.engine.compiled import build as compiled_build
from activation_bench.engine.compiled import choose as compiled
from activation_bench.engine.compiled import store as compile_store

needs_compiler = pytest.mark.skipif(compiled.compiler_missing() is not None, reason="no C++ compiler")


def test_the_digest_names_every_input_that_shapes_the_code(monkeypatch):
    x, y = torch.zeros(4, 8, 3), torch.zeros(4, 8, 1)
    config = {"activations": [{"name": "gelu"}], "sizes": [4]}
    key = compile_store.identity("step", config, ([x], x, y))
    assert key == compile_store.identity("step", dict(config), ([x.clone()], x.clone(), y.clone()))
    others = [
        compile_store.identity("evaluate", config, ([x], x, y)),
        compile_store.identity("step", {**config, "activations": [{"name": "relu"}]}, ([x], x, y)),
        compile_store.identity("step", config, ([x], torch.zeros(4, 9, 3), y)),  # rows
        compile_store.identity("step", config, ([x], x.double(), y)),  # dtype
        compile_store.identity("step", config, ([x], x.transpose(1, 2).contiguous().transpose(1, 2), y)),  # strides
        compile_store.identity("step", config, ([x, x], x, y)),  # one more tensor
    ]
    with torch.no_grad():
        others.append(compile_store.identity("step", config, ([x], x, y)))  # grad mode is a guard
    for setting in ("TORCHINDUCTOR_MAX_AUTOTUNE", "AOT_INDUCTOR_COMPILE_WRAPPER_OPT_LEVEL"):  # inductor's settings
        with monkeypatch.context() as env:
            env.setenv(setting, "1")
            others.append(compile_store.identity("step", config, ([x], x, y)))
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        others.append(compile_store.identity("step", config, ([x], x, y)))
    finally:
        torch.set_num_threads(threads)
    assert len({key, *others}) == len(others) + 1
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")
    assert compile_store.identity("step", config, ([x], x, y)) == key  # where the caches are is not what they hold


def test_inductors_own_default_cache_folder_is_not_taken_for_the_users_choice(tmp_path, monkeypatch):
    import torch._inductor.runtime.cache_dir_utils as inductor_dirs

    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(tmp_path / "ours"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert compiled_build.cache_dir() == str(tmp_path / "ours" / "inductor")
    inductor_dirs.cache_dir()  # what importing inductor does: sets the variable to its default
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == inductor_dirs.default_cache_dir()
    assert compiled_build.cache_dir() == str(tmp_path / "ours" / "inductor")
    compiled_build._configure()  # and the process's inductor follows it, so children inherit ours
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "ours" / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "theirs"))  # a user's own choice
    assert compiled_build.cache_dir() == str(tmp_path / "theirs")


def test_a_missing_truncated_or_corrupt_package_is_not_loaded(tmp_path):
    root, key = str(tmp_path), "k"
    assert compile_store.load(root, key) is None  # none saved
    payload = b"not a package"
    named = compile_store.folder(root) / f"{key}-{hashlib.sha256(payload).hexdigest()[:compile_store.NAME_HASH]}.pt2"
    compile_store._write(named, payload)
    assert compile_store.load(root, key) is None  # its bytes match its name, but the loader refuses them
    compile_store._write(named, b"not a packag")
    assert compile_store.load(root, key) is None  # truncated: its bytes no longer match its name


def test_a_successful_cpu_probe_is_remembered_and_a_failed_one_is_not(tmp_path, monkeypatch):
    from torch._inductor import cpu_vec_isa

    calls: list[str] = []

    def probe(self, output_path: str) -> bool:
        calls.append(output_path)
        return "good" in output_path

    monkeypatch.setattr(cpu_vec_isa.VecISA, "_probe_load", probe)
    compile_store.remember_isa_probes(str(tmp_path))
    compile_store.remember_isa_probes(str(tmp_path))  # installed once
    isa = cpu_vec_isa.VecAVX2()
    good, bad = tmp_path / "good.so", tmp_path / "bad.so"
    good.write_bytes(b"1")
    bad.write_bytes(b"1")
    assert [isa._probe_load(str(p)) for p in (good, good, bad, bad)] == [True, True, False, False]
    assert calls == [str(good), str(bad), str(bad)]
    good.write_bytes(b"22")  # another library at the same path: probed again
    assert isa._probe_load(str(good)) and calls[-1] == str(good) and len(calls) == 4


def _train_stack(overrides: list[str], epochs: int) -> tuple[list[str], list[str], list[torch.Tensor]]:
    """(every step's losses, each epoch's validation loss, as hex; the final parameters and the
    optimiser's state) of one stack trained through build.build."""
    cfgs = compose_many(expand(["engine=compiled", *overrides]).members)
    stack = train._build(cfgs)
    start = [p.detach().clone() for p in stack.opt.params]
    fns = compiled_build.build(stack, stack.fixed_batches)
    losses, val = [], []
    for _ in range(epochs):
        for xb, yb in stack.fixed_batches:
            losses += [v.hex() for v in fns.step(xb, yb).tolist()]
        with torch.no_grad():
            val += [v.hex() for v in fns.evaluate(*stack.val)[0].tolist()]
    state = [p.detach().clone() for p in stack.opt.params]
    assert not any(torch.equal(a, b) for a, b in zip(start, state))  # trained in place
    return losses, val, state + [t.clone() for t in (*stack.opt.exp_avgs, *stack.opt.exp_avg_sqs)]


GRIDS = {
    # compiled.py's hand-written step, full batch, regression
    "plain": ["activation=gelu,relu", "seed=0,1", "data.n_samples=8", "data.n_val=8", "data.input_dim=4",
              "model.hidden_dim=6", "lr=0.01"],
    # compiled_mlp.py's step (torch.func.vjp inside), minibatches of two shapes, dropout's masks,
    # a classifier
    "deep classifier": ["activation=elu,tanh", "seed=0,1", "data=iris", "model.hidden_dim=6", "model.depth=2",
                        "model.dropout=0.1", "batch_size=32", "shuffle=true", "lr=0.01"],
}


def _same(got: tuple, want: tuple) -> bool:
    return got[0] == want[0] and got[1] == want[1] and all(torch.equal(a, b) for a, b in zip(got[2], want[2]))


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("grid", GRIDS)
def test_compiled_loaded_and_recompiled_packages_give_the_same_bits(grid, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    store = compile_store.folder(str(tmp_path))
    saved = _train_stack(GRIDS[grid], epochs=3)  # compiled ahead of time, saved, run from the package
    files = sorted(store.glob("*.pt2"))
    assert len(files) >= 2 and not list(store.glob(".*"))  # a step and an evaluation at least; no temporary left

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although saved")

    with monkeypatch.context() as m:
        m.setattr(compile_store, "compile_and_save", no_compile)
        m.setattr(torch, "compile", no_compile)
        loaded = _train_stack(GRIDS[grid], epochs=3)  # every function loaded from its package
    assert _same(loaded, saved)
    # a damaged file is passed over, compiled again and saved whole, with the same bits
    files[0].write_bytes(files[0].read_bytes()[: os.path.getsize(files[0]) // 2])
    again = _train_stack(GRIDS[grid], epochs=3)
    assert _same(again, saved)
    assert len(sorted(store.glob("*.pt2"))) == len(files) + 1  # the damaged one left aside, never loaded
    # torch.compile (where this torch loads no packages): the same numbers up to rounding
    with monkeypatch.context() as m:
        m.setattr(compile_store, "available", lambda: False)
        fallback = _train_stack(GRIDS[grid], epochs=3)
    assert [float.fromhex(v) for v in fallback[0]] == pytest.approx([float.fromhex(v) for v in saved[0]], rel=1e-5)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(fallback[2], saved[2]))


@pytest.mark.slow
@needs_compiler
def test_a_process_that_loads_its_packages_imports_neither_dynamo_nor_inductor(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from activation_bench.config.compose import compose_many
        from activation_bench.config.grid import expand
        from activation_bench.engine import train
        cfgs = compose_many(expand(["engine=compiled", *{GRIDS["plain"]!r}, "epochs=2"]).members)
        result = train.train(cfgs)
        assert {{r.engine for r in result}} == {{"compiled"}}
        print(sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules))
    """)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    assert runs[0].stdout.split("\n")[-2] == "['torch._dynamo', 'torch._inductor']"  # the first compiled
    assert runs[1].stdout.split("\n")[-2] == "[]"  # the second loaded


def test_a_graph_that_cannot_be_compiled_ahead_takes_torch_compile_once_per_function(tmp_path, monkeypatch):
    compiled_by: list[str] = []

    def aot_fails(fn, args, root, key):
        compiled_by.append("aot")
        raise RuntimeError("simulated")

    def plain(fn, **options):
        compiled_by.append("torch.compile")
        return fn

    monkeypatch.setattr(compile_store, "compile_and_save", aot_fails)
    monkeypatch.setattr(compile_store, "prepare_compiler", lambda root: None)
    monkeypatch.setattr(torch, "compile", plain)
    shapes = compile_store.Shapes(lambda w, x, y: (w * x).sum() + y.sum(), "step", {}, str(tmp_path))
    w = torch.ones(3)
    assert shapes.check(w, torch.ones(2, 3), torch.ones(2)) == 8.0
    assert shapes.check(w, torch.ones(4, 3), torch.ones(4)) == 16.0
    assert compiled_by == ["aot", "torch.compile", "aot"]  # one torch.compile serves every shape
    assert shapes(w, torch.ones(2, 3), torch.zeros(2)) == 6.0 and len(compiled_by) == 3  # dispatched, not compiled


@pytest.mark.parametrize("fails", [False, True])
def test_the_cyclic_collector_pauses_while_a_stack_compiles_and_runs_again_after(monkeypatch, fails):
    import gc

    from tests.conftest import TINY

    seen: list[bool] = []

    def build(stack, batches, notice=None, saved_only=False):
        seen.append(gc.isenabled())
        if fails:
            raise RuntimeError("simulated")
        return "built"

    monkeypatch.setattr(compiled, "build", build)
    stack = train._build(compose_many(expand(["engine=compiled", *TINY]).members))
    assert gc.isenabled()
    engine, step = compiled.prepare(stack, "compiled", "requested", 1, None)
    assert seen == [False] and gc.isenabled()
    assert (engine, step) == (("eager", None) if fails else ("compiled", "built"))


def test_a_cold_compilation_is_said_as_it_starts_and_ends_and_a_saved_one_is_not(tmp_path, monkeypatch):
    lines: list[str] = []
    compiled_now: list[str] = []

    def compile_and_save(fn, args, root, key):
        compiled_now.append(key)
        lines.append("(compiling)")
        return fn

    monkeypatch.setattr(compile_store, "available", lambda: True)
    monkeypatch.setattr(compile_store, "compile_and_save", compile_and_save)
    x, y = torch.ones(4, 8, 3), torch.zeros(4, 8, 1)
    shapes = compile_store.Shapes(lambda w, xb, yb: xb * 2, "step", {"sizes": [4]}, str(tmp_path), lines.append)
    assert torch.equal(shapes.check([x], x, y), x * 2)
    assert len(compiled_now) == 1 and len(lines) == 3
    assert lines[0].startswith("compiling the step for inputs of shape 4x8x3 (once per shape on this machine; "
                               "saved in ")
    assert str(compile_store.folder(str(tmp_path))) in lines[0] and lines[1] == "(compiling)"
    assert lines[2].startswith("compiled the step in ") and lines[2].endswith(" s")
    shapes([x], x, y)  # the same shape again: nothing compiled, nothing said
    assert len(compiled_now) == 1 and len(lines) == 3
    # a package found in the store is loaded without a word
    monkeypatch.setattr(compile_store, "load", lambda root, key: lambda w, xb, yb: xb * 2)
    quiet: list[str] = []
    compile_store.Shapes(lambda w, xb, yb: xb * 2, "step", {"sizes": [4]}, str(tmp_path), quiet.append).check([x], x, y)
    assert quiet == [] and len(compiled_now) == 1
    # where packages cannot be saved, torch.compile's compilation is said as this process's only
    monkeypatch.setattr(compile_store, "available", lambda: False)
    monkeypatch.setattr(compile_store, "prepare_compiler", lambda root: None)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    unsaved: list[str] = []
    compile_store.Shapes(lambda w, xb, yb: xb * 2, "evaluate", {}, str(tmp_path), unsaved.append).check([x], x, y)
    assert unsaved[0] == ("compiling the evaluate for inputs of shape 4x8x3 (torch.compile: once per shape in this "
                          "process, not saved)") and unsaved[1].startswith("compiled the evaluate in ")
