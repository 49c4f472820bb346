"""Property-based fuzzing (hypothesis) of every parser a user's text reaches: command-line overrides
(run, sweep), expressions, study files, CSV tables, image files, MNIST-1D's cache, saved configs
given to `run --config`.

The property, for every input: the command ends with exit 0, or with exactly one line on stderr and
exit 2; never a traceback, never a file written outside the runs folder it was given. Commands run
in-process (Typer's runner), each example in a fresh temporary folder that is also the working
directory, with tiny sizes (a trained run is one epoch of a few samples).

Profiles: the default suite runs each property on a few dozen derandomized examples (the same ones
every run, so CI cannot flake on a new draw); `python -m pytest -m slow tests/test_fuzz.py` runs
the slow-marked copies of the same properties on 50x as many random examples. Overrides that start
with '-' are left out: the command line reads them as options (click's own usage errors), not as
overrides.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import pickle
import re
import string
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from activation_bench.cli.main import app

COMMON: dict[str, Any] = {"deadline": None, "database": None,
                          "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                    HealthCheck.data_too_large]}
FIXTURE = {**COMMON, "suppress_health_check": [*COMMON["suppress_health_check"], HealthCheck.function_scoped_fixture]}
BASE = ["epochs=1", "data.n_samples=4", "data.input_dim=2", "model.hidden_dim=2"]


def fuzz(quick: int, strategy: st.SearchStrategy) -> Callable[[Callable], tuple[Callable, Callable]]:
    """The property as two tests: the default suite's (`quick` derandomized examples) and a
    slow-marked one (50x as many, random; run with -m slow)."""
    def make(fn: Callable) -> tuple[Callable, Callable]:
        fast = settings(max_examples=quick, derandomize=True, **COMMON)(given(strategy)(fn))
        slow = pytest.mark.slow(settings(max_examples=quick * 50, derandomize=False, **COMMON)(given(strategy)(fn)))
        return fast, slow
    return make


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A fresh folder, the working directory for the example (relative paths land in it)."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="actbench-fuzz-") as tmp:
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(before)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def invoke(root: Path, args: list[str], allowed: Path, inputs: set[Path] = frozenset()) -> Any:
    """Run args in-process; check the property: exit 0, or exit 2 with one `error:` line; no
    traceback; under `root`, no file written except under `allowed` (and the `inputs` made first)."""
    result = CliRunner().invoke(app, args)
    code, err = result.exit_code, result.stderr.strip()
    assert code in (0, 2), (args, code, result.output[-2000:], repr(result.exception))
    if code == 2:
        assert err.startswith("error: ") and len(err.splitlines()) == 1, (args, err[-2000:])
    assert "Traceback" not in result.output, (args, result.output[-2000:])
    stray = {p for p in _files(root) - set(inputs) if not p.is_relative_to(allowed)}
    assert not stray, (args, sorted(stray))
    return result


def _small_numbers(text: str) -> bool:
    """No digit run longer than two (so a fuzzed value cannot ask for 10**9 epochs or members)."""
    return re.search(r"\d{3}", text) is None


# ---------------------------------------------------------------- overrides (run, sweep)

TOKENS = ["0", "1", "2", "3", "-1", "0.5", "1e-3", "1e3", "nan", "inf", "-inf", "true", "false", "null", "None",
          "gelu", "relu", "expr", "prelu", "rrelu", "glu", "normal", "uniform", "function", "csv", "iris", "he",
          "mlp", "cnn", "layer", "batch", "sgd", "adam", "float64", "cuda", "x", "e", "abc", "é", "日本",
          "=", ",", ".", "(", ")", "[", "]", "{", "}", "'", '"', ":", "*", "+", "~", "$", "${", "\\", "/", " ", "@",
          "%", "#", "range(", "glob(", "choice(", "interval(", "tag(", "sort(", "shuffle(", "str(", "int(",
          "\t", "\x00", "../"]
KEYS = ["activation", "activation.fn", "activation.negative_slope", "activation.learnable", "+activation.beta",
        "data", "data.n_samples", "data.input_dim", "data.std", "data.mean", "data.low", "data.high", "data.target",
        "data.n_val", "data.fn", "data.path", "data.task", "data.noise", "model", "model.hidden_dim",
        "model.depth", "model.init", "model.dropout", "model.norm", "model.residual", "epochs", "lr", "seed",
        "batch_size", "shuffle", "optimizer", "dtype", "log.every", "log.preact_stats", "log.grad_norms",
        "log.train_eval", "checkpoint.seconds", "checkpoint.every", "device", "nosuch", "data.nosuch", "+extra",
        "~epochs", "++lr", "hydra.run.dir", "hydra.launcher.n_jobs", "hydra.job.chdir", "epochs.x", ""]

text = st.lists(st.sampled_from(TOKENS), max_size=6).map("".join) | st.text(max_size=12)
value = text.filter(_small_numbers)
override = (st.tuples(st.sampled_from(KEYS), value).map(lambda kv: f"{kv[0]}={kv[1]}")
            | value).filter(lambda o: not o.startswith("-"))


def _check_run(overrides: list[str]) -> None:
    with workdir() as root:
        invoke(root, ["run", "--runs-dir", "runs", "-q", *BASE, *overrides], root / "runs")


def _check_sweep(overrides: list[str]) -> None:
    with workdir() as root:
        invoke(root, ["sweep", "--runs-dir", "runs", "-q", "--name", "s", *BASE, *overrides], root / "runs")


sweep_value = st.lists(st.sampled_from(TOKENS), max_size=6).map("".join).filter(lambda t: re.search(r"\d\d", t) is None)
sweep_override = (st.tuples(st.sampled_from(KEYS), sweep_value).map(lambda kv: f"{kv[0]}={kv[1]}")
                  | sweep_value).filter(lambda o: not o.startswith("-"))

test_fuzz_run_overrides, test_fuzz_run_overrides_long = fuzz(10, st.lists(override, min_size=1, max_size=3))(
    _check_run)
test_fuzz_sweep_overrides, test_fuzz_sweep_overrides_long = fuzz(8, st.lists(sweep_override, min_size=1,
                                                                              max_size=2))(_check_sweep)


@pytest.mark.parametrize("args", [["activation=\n"], ["epochs=1\r2"], ["activation=expr", 'activation.fn="\n"'],
                                  ["data=\u2028"], ["lr=\x0b"]])
def test_a_message_quoting_a_line_break_stays_one_line(args):
    """Found by the fuzzer: 'activation=\\n' (an override holding a line break) was quoted as is, so the
    error took two lines; every message now shows line breaks escaped."""
    with workdir() as root:
        result = invoke(root, ["run", "--runs-dir", "runs", "-q", *BASE, *args], root / "runs")
        assert result.exit_code == 2 and "\\" in result.stderr


# ---------------------------------------------------------------- expressions

FUNCS = ["abs", "exp", "log", "log1p", "sqrt", "sin", "cos", "tanh", "sinh", "cosh", "asinh", "atan", "erf",
         "sigmoid", "softplus", "relu", "gelu", "silu", "sinc", "nosuch", "x"]
atom = st.sampled_from(["x", "beta", "a", "1", "0", "2.5", "1e30", "1e-30", "-1", "nan", "inf", "pi", "e", "_x",
                        "x1", "é", ""]) | st.text(string.ascii_letters + string.digits + "._", max_size=4)
expression = st.recursive(
    atom,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "**", "", " ", "%", "//", "==", "<", "&"]), inner)
        .map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
        st.tuples(st.sampled_from(FUNCS), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["min", "max", "pow", "atan2"]), inner, inner)
        .map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        inner.map(lambda s: f"-{s}"),
        inner.map(lambda s: s + ")"),
        inner.map(lambda s: "(" + s),
    ),
    max_leaves=8,
) | st.text(max_size=20)


def _check_expression(fn: str) -> None:
    with workdir() as root:
        if fn.startswith("-"):  # an option to --fn's parser, not an expression
            return
        invoke(root, ["activations", "--fn", fn], root / "runs")
        quoted = fn.replace("\\", "\\\\").replace('"', '\\"')
        invoke(root, ["run", "--runs-dir", "runs", "-q", *BASE, "activation=expr", f'activation.fn="{quoted}"',
                      "+activation.beta=1.5", "+activation.a=0.5"], root / "runs")


test_fuzz_expressions, test_fuzz_expressions_long = fuzz(5, expression)(_check_expression)


@pytest.mark.parametrize("fn", ["1", "2.5", "beta:beta=2", "-(3)"])
def test_facts_of_a_function_that_does_not_depend_on_x(fn):
    """Found by the fuzzer: `activations --fn 1` ended in autograd's RuntimeError (no graph from x);
    a constant's facts are printed like x-x's, the probe's refusal among them."""
    result = CliRunner().invoke(app, ["activations", "--fn", fn, "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert "f'(0),0\n" in result.stdout and "is constant on the probe points" in result.stdout


# ---------------------------------------------------------------- study files

STUDY = """\
title: fuzz
runs_dir: runs
output: out
sweeps:
  s:
    grid: ['activation=gelu,relu', 'data=normal,uniform', 'seed=range(4)']
    overrides: [epochs=2, data.n_samples=4, data.input_dim=2, model.hidden_dim=2, data.n_val=2]
comparisons:
  c: {sweeps: [s], metric: early_stop, loss: val_loss, tune: [activation], tune_seeds: 2}
rankings:
  r: {sweeps: [s], metric: final}
figures:
  f: {sweeps: [s], loss: train_loss}
"""
YAML_TOKENS = ["&a ", "*a", "[", "]", "{", "}", ":", ": ", "- ", ",", "'", '"', "!!python/object:os.system ",
               "!!binary ", "~", "null", "1", "-1", "0.5", "nan", "1e309", "..", "/etc", "\n", "  ", "#", "?",
               "<<: ", "|", ">", "%YAML 1.1\n", "---\n", "x", "seed=range(2)", "epochs=3"]
yaml_text = st.lists(st.sampled_from(YAML_TOKENS) | st.text(max_size=4), max_size=10).map("".join)


@st.composite
def study_text(draw: Any) -> str:
    lines = STUDY.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["value", "line", "insert", "delete"]))
        if how == "value" and ":" in lines[i]:
            head = lines[i].split(":", 1)[0]
            lines[i] = f"{head}: {draw(yaml_text)}\n"
        elif how == "line":
            lines[i] = draw(yaml_text) + "\n"
        elif how == "insert":
            lines.insert(i, draw(yaml_text) + "\n")
        else:
            del lines[i]
    return "".join(lines)


def _check_study(doc: str) -> None:
    with workdir() as root:
        path = root / "study.yaml"
        path.write_text(doc, encoding="utf-8")
        result = invoke(root, ["study", "run", str(path), "--dry-run"], root / "runs", {path})
        assert _files(root) == {path} or result.exit_code == 0, "a dry run wrote files"
        assert _files(root) == {path}


test_fuzz_study_files, test_fuzz_study_files_long = fuzz(20, study_text() | yaml_text)(_check_study)


# ---------------------------------------------------------------- CSV tables

CELLS = ["1", "0", "-2.5", "1e3", "", "nan", "NaN", "inf", "-inf", "a", "b", "yes", '"x,y"', '"', "1,5", " ", "NA",
         "None", "é", "0x10", "True"]
cell = st.sampled_from(CELLS) | st.text(max_size=3).filter(lambda t: "\n" not in t and "\r" not in t)


@st.composite
def csv_case(draw: Any) -> tuple[str, str, str | None]:
    n_cols = draw(st.integers(0, 4))
    header = [draw(st.sampled_from(["y", "x1", "x2", "label", "", "y", "é"]) | st.text(max_size=3))
              for _ in range(n_cols)]
    sep = draw(st.sampled_from([",", ",", ";", "\t"]))
    rows = [[draw(cell) for _ in range(draw(st.integers(max(0, n_cols - 1), n_cols + 1)))]
            for _ in range(draw(st.integers(0, 14)))]
    body = sep.join(header) + "\n" + "".join(sep.join(r) + "\n" for r in rows)
    if draw(st.booleans()):
        body = draw(st.text(max_size=40)) if draw(st.booleans()) else body[: draw(st.integers(0, len(body)))]
    target = draw(st.sampled_from([*header, "y", "nosuch", ""]) if header else st.sampled_from(["y", ""]))
    task = draw(st.sampled_from([None, "classification", "regression", "other"]))
    return body, target, task


def _check_csv(case: tuple[str, str, str | None]) -> None:
    body, target, task = case
    with workdir() as root:
        path = root / "table.csv"
        path.write_text(body, encoding="utf-8", errors="surrogatepass")
        args = ["run", "--runs-dir", "runs", "-q", "epochs=1", "model.hidden_dim=2", "data=csv",
                f"data.path={path}", f"data.target='{target}'" if "'" not in target else "data.target=x"]
        invoke(root, args + ([f"data.task={task}"] if task else []), root / "runs", {path})


test_fuzz_csv_tables, test_fuzz_csv_tables_long = fuzz(8, csv_case())(_check_csv)


# ---------------------------------------------------------------- image files

IDX = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
CIFAR = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]


@st.composite
def idx_file(draw: Any, ndim: int) -> bytes:
    magic = draw(st.sampled_from([0x800 + ndim, 0x800 + ndim, 0x800 + 3 - ndim + 1, 0, 0xFFFFFFFF]))
    dims = [draw(st.sampled_from([0, 1, 2, 3, 28, 28, 2**16, 2**31, 2**32 - 1]) | st.integers(0, 40))
            for _ in range(ndim)]
    if ndim == 3 and draw(st.booleans()):
        dims[1:] = [28, 28]
    n = int(np.prod(dims, dtype=object)) if dims else 0
    size = n if n < 5000 and draw(st.booleans()) else draw(st.integers(0, 64))
    payload = draw(st.binary(min_size=size, max_size=size)) if size <= 64 else bytes(
        draw(st.integers(0, 12)) for _ in range(size))
    raw = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + payload
    raw = raw[: draw(st.integers(0, len(raw)))] if draw(st.integers(0, 5)) == 0 else raw
    return gzip.compress(raw) if draw(st.booleans()) else raw


@st.composite
def cifar_file(draw: Any) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=64))
    data = draw(st.sampled_from([
        np.zeros((2, 3072), np.uint8), np.ones((1, 3072), np.uint8), np.zeros((2, 10), np.uint8),
        np.zeros((2, 3072), np.float32), np.zeros(0, np.uint8), "text", None, [1, 2]]))
    labels = draw(st.sampled_from([[0, 1], [9], [10, -1], ["a", "b"], [0.5, 1.5], [], None, np.array([1, 2]),
                                   [[1], [2]]]))
    obj: Any = {b"data": data, b"labels": labels} if kind < 3 else draw(st.sampled_from([[1], "x", {b"data": 1}]))
    raw = pickle.dumps(obj, protocol=draw(st.integers(2, 5)))
    return raw[: draw(st.integers(0, len(raw)))] if draw(st.integers(0, 4)) == 0 else raw


images_case = st.one_of(
    st.tuples(st.sampled_from(["mnist", "fashion_mnist"]),
              st.tuples(idx_file(3), idx_file(1), idx_file(3), idx_file(1))),
    st.tuples(st.just("cifar10"), st.lists(cifar_file(), min_size=6, max_size=6).map(tuple)),
)


def _check_images(case: tuple[str, tuple[bytes, ...]]) -> None:
    name, contents = case
    folder = {"mnist": "MNIST/raw", "fashion_mnist": "FashionMNIST/raw", "cifar10": "cifar-10-batches-py"}[name]
    with workdir() as root:
        (root / "data" / folder).mkdir(parents=True)
        made = set()
        for base, raw in zip(CIFAR if name == "cifar10" else IDX, contents):
            (root / "data" / folder / base).write_bytes(raw)
            made.add(root / "data" / folder / base)
        invoke(root, ["run", "--runs-dir", "runs", "-q", f"data={name}", f"data.root={root / 'data'}", "epochs=1",
                      "model.hidden_dim=2", "batch_size=2"], root / "runs", made)


test_fuzz_image_files, test_fuzz_image_files_long = fuzz(6, images_case)(_check_images)


# ---------------------------------------------------------------- MNIST-1D's cache file

def _check_mnist1d_cache(case: tuple[bytes, str, bool]) -> None:
    """The cache is read back (a corrupt one is generated again, never an error): whatever the .npz
    and .sha256 hold, reading returns arrays whose digest matches, or None."""
    from activation_bench.data import mnist1d as generated

    raw, digest, valid_npz = case
    with workdir() as root:
        path = root / "mnist1d.npz"
        if valid_npz:
            buf = io.BytesIO()
            np.savez(buf, **{k: np.frombuffer(raw[: len(raw) // 8 * 8], np.float64) for k in generated.ARRAYS})
            raw = buf.getvalue()
        path.write_bytes(raw)
        path.with_name(path.name + ".sha256").write_text(digest)
        got = generated._read_cached(path)
        assert got is None or generated.arrays_sha256(got[0]) == got[1] == digest.strip()


mnist1d_case = st.tuples(st.binary(max_size=200), st.text(max_size=70), st.booleans())
test_fuzz_mnist1d_cache, test_fuzz_mnist1d_cache_long = fuzz(20, mnist1d_case)(_check_mnist1d_cache)


# ---------------------------------------------------------------- saved configs (run --config)

@pytest.fixture(scope="module")
def saved_config(tmp_path_factory) -> str:
    runs = tmp_path_factory.mktemp("saved") / "runs"
    result = CliRunner().invoke(app, ["run", "--runs-dir", str(runs), "-q", "--name", "r", *BASE])
    assert result.exit_code == 0, result.output
    return (runs / "r" / "config.yaml").read_text(encoding="utf-8")


@st.composite
def saved_mutation(draw: Any) -> list[tuple[str, int, str]]:
    return [(draw(st.sampled_from(["value", "line", "insert", "delete"])), draw(st.integers(0, 60)),
             draw(yaml_text.filter(_small_numbers) | value)) for _ in range(draw(st.integers(1, 3)))]


def _mutated(text: str, edits: list[tuple[str, int, str]]) -> str:
    lines = text.splitlines(keepends=True)
    for how, i, new in edits:
        i %= len(lines) or 1
        if not lines:
            lines = [new + "\n"]
        elif how == "value" and ":" in lines[i]:
            lines[i] = lines[i].split(":", 1)[0] + ": " + new + "\n"
        elif how == "line":
            lines[i] = new + "\n"
        elif how == "insert":
            lines.insert(i, new + "\n")
        else:
            del lines[i]
    return "".join(lines)


def _check_saved(saved: str, edits: list[tuple[str, int, str]]) -> None:
    with workdir() as root:
        path = root / "config.yaml"
        path.write_text(_mutated(saved, edits), encoding="utf-8")
        invoke(root, ["run", "--runs-dir", "runs", "-q", "--config", str(path)], root / "runs", {path})


@settings(max_examples=10, derandomize=True, **FIXTURE)
@given(edits=saved_mutation())
def test_fuzz_saved_configs(saved_config, edits):
    _check_saved(saved_config, edits)


@pytest.mark.slow
@settings(max_examples=500, derandomize=False, **FIXTURE)
@given(edits=saved_mutation())
def test_fuzz_saved_configs_long(saved_config, edits):
    _check_saved(saved_config, edits)
