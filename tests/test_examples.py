"""Every `actbench ...` example runs: those of each command's --help text and of every ```bash and
```console block of README.md and docs/**/*.md (continuation lines joined, the block's shell variables
expanded, comments dropped, in console blocks the `$ ` lines), each run once in a fresh working
directory as a user would type it, with these mechanical changes and nothing else:

- commands that train are shortened: `epochs=N` becomes `epochs=2` (added where the example leaves
  the default), `seed=range(N)` becomes `seed=range(2)`, `data.n_train=N` becomes 160 (added where a
  run or sweep trains on data=digits or data=mnist1d), `--candidates N` becomes 20, a transformer's
  `data.steps` becomes 5 and its `data.eval_windows` 4; image data
  (`data=mnist`, `fashion_mnist`, `cifar10`) is read from tiny files in the exact formats, written
  to the cache directory the default `data.root` points at; a `search` adds `--dry-run` (every
  candidate composed and probed, the rungs planned, nothing trained) and its overrides go through
  `actbench config` too;
- commands that read results (compare, rank, plot, report, export) read small fixture sweeps built
  once per test run and shared by the xdist workers (FIXTURES): each path an example reads
  (runs/my-sweep, runs/bessel, runs/<search>/rung3, a shell glob below one of them, ...) is mapped
  to one by PATHS (PATHS_FOR where one example needs another), input files (houses.csv,
  my_space.yaml, ...) are written by FILES, and files an example writes (-o, --output, --plot,
  `> FILE`) must exist afterwards (a `report` without -o writes report.html into the first sweep it
  reads: it reads its own copy, the fixtures stay as built);
- a study (`actbench study`) reads its file: my-study.yaml is docs/studies.md's own example with
  `epochs=2`, a shipped one (docs/studies/*/study.yaml) is copied from the checkout and only
  planned (`--dry-run`: hours of training; one of data=shakespeare plans against a small text in
  the cache directory, the copy's checksum check off); `study tables` reads a copy of the sweeps
  of my-study.yaml run once per test run (`study run my-study.yaml` trains from nothing);
- what needs a cluster or a server is listed in OFFLINE, what takes seconds in SLOW (the quick run
  checks it up to the slow part, a figure built but a stand-in file written for its drawing;
  test_slow_example_runs runs it in full); examples that run the same command on the same
  fixture under two names (runs/digits and runs/my-digits-sweep) run once (same_run); an example that fails
  as written because of a product bug in KNOWN_BUGS (an expected failure until it is fixed).

A new example that this does not cover (a path or file not in the tables, an unknown command)
fails test_every_example_is_covered; a table entry that no example uses fails it too."""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from activation_bench.cli.main import app
from tests.conftest import built_once, leave_files_undrawn

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# --- collecting the examples -------------------------------------------------------------------

@dataclass
class Example:
    argv: list[str]  # the words after `actbench`
    stdout: str | None  # `> FILE`
    where: list[str]  # where it is written (file or `actbench CMD --help`)

    @property
    def key(self) -> str:
        return shlex.join(self.argv) + (f" > {self.stdout}" if self.stdout else "")


def _words(line: str) -> tuple[list[str], str | None]:
    """A command line's words after `actbench`, comments dropped, and the file of `> FILE`."""
    words = shlex.split(line, comments=True)
    assert words[0] == "actbench", line
    stdout = None
    if ">" in words:
        i = words.index(">")
        words, stdout = words[:i] + words[i + 2:], words[i + 1]
    return words[1:], stdout


def help_lines() -> list[tuple[str, str]]:
    """(command, line) for every line of every command's help that starts with `actbench `."""
    out = []

    def walk(cmd: click.Command, path: str) -> None:
        for line in (cmd.help or "").splitlines():
            if line.strip().startswith("actbench "):
                # a note after the command, "   (re-run a saved run, ...)", is not part of it
                out.append((path, re.sub(r"\s{3,}\(.*\)$", "", line.strip())))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "actbench")
    return out


def _assignments(line: str, env: dict[str, list[str] | str]) -> None:
    """A shell line of variable assignments (X='a b'; Y=('a' 'b') arrays; `export X=1`) into env."""
    for statement in _split_statements(line):
        words = shlex.split(statement, comments=True)
        if words and words[0] == "export":
            words = words[1:]
        name, _, first = words[0].partition("=")
        assert name.isidentifier(), line
        if first.startswith("("):  # an array: to the end of the statement
            items = [first[1:], *words[1:]]
            assert items[-1].endswith(")"), line
            items[-1] = items[-1][:-1]
            env[name] = [w for w in items if w]
        else:
            assert len(words) == 1, line
            env[name] = first


def _split_statements(line: str) -> list[str]:
    """line split at the semicolons outside quotes."""
    parts, current, quote = [], "", None
    for ch in line:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ";":
            parts.append(current)
            current = ""
            continue
        current += ch
    return [p.strip() for p in [*parts, current] if p.strip()]


def _expand(line: str, env: dict[str, list[str] | str]) -> str:
    """The block's variables substituted the way bash would: "${A[@]}" one word per item, "$X"
    one word, $X split on whitespace."""
    def value(name: str) -> list[str] | str:
        assert name in env, f"{name} is not assigned in its block: {line}"
        return env[name]

    def expanded(part: str) -> str:
        part = re.sub(r'"\$\{(\w+)\[@\]\}"', lambda m: shlex.join(value(m.group(1))), part)
        part = re.sub(r'"\$\{?(\w+)\}?"', lambda m: shlex.quote(str(value(m.group(1)))), part)
        return re.sub(r"\$\{?(\w+)\}?", lambda m: str(value(m.group(1))), part)

    # nothing inside single quotes is expanded ('+model.kwargs.num_classes=${data:classes}')
    return "".join(p if p.startswith("'") else expanded(p) for p in re.split(r"('[^']*')", line))


def doc_lines(path: Path) -> list[str]:
    """The `actbench` command lines of the ```bash and ```console blocks of a markdown file:
    continuation lines joined, bash arrays across lines joined, the block's variables expanded;
    in console blocks only the `$ ` prompt lines."""
    out = []
    for kind, body in re.findall(r"```(bash|console)\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
        lines = body.replace("\\\n", " ").splitlines()
        env: dict[str, list[str] | str] = {}
        while lines:
            line = lines.pop(0).strip()
            while line.count("(") > line.count(")") and lines:  # X=(a b \n c d)
                line += " " + lines.pop(0).strip()
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if line.startswith("actbench "):
                out.append(_expand(line, env))
            elif re.match(r"(export\s+)?[A-Za-z_]\w*=", line):
                _assignments(line, env)
    return out


def collect() -> dict[str, Example]:
    """Every example, once, with all the places it is written."""
    found: dict[str, Example] = {}
    sources = [(f"`{cmd} --help`", line) for cmd, line in help_lines()]
    sources += [(str(p.relative_to(ROOT)), line) for p in DOCS for line in doc_lines(p)]
    for where, line in sources:
        argv, stdout = _words(line)
        ex = Example(argv, stdout, [where])
        found.setdefault(ex.key, Example(argv, stdout, [])).where.append(where)
    return found


EXAMPLES = collect()


# --- what the examples read ----------------------------------------------------------------------

# the fixture sweeps, built once per session under <tmp>/runs/ (tiny: 4 hidden units, few epochs)
FIXTURES = {
    # regression on two real tables, two lrs, 4 seeds (no example of these paths tunes), 100 epochs (epoch=100)
    "real-data-tuned/tables": ["data=diabetes,star98", "activation=gelu,relu", "lr=1e-3,1e-2", "seed=range(4)",
                               "epochs=100"],
    # two function tasks, two lrs, 8 seeds
    "real-data-tuned/functions-lo": ["data=function", "data.fn=bessel_j0,exp_sin", "data.n_samples=60",
                                     "activation=gelu,relu", "lr=1e-3,1e-2", "seed=range(8)", "epochs=10"],
    # the gelu_vs_relu preset's grid: synthetic data, 20 epochs (its examples read epoch=10 and final)
    "syn": ["experiment=gelu_vs_relu", "activation=gelu,relu", "data=normal,uniform", "data.target=random,teacher",
            "seed=range(3)", "data.input_dim=4", "epochs=20"],
    # classifiers on two tables, two lrs, with dropout and the dropout-free training loss, 7 seeds
    "classes": ["data=iris,wine", "activation=gelu,relu", "lr=1e-2,1e-1", "model.dropout=0.5", "seed=range(7)",
                "log.train_eval=true", "epochs=5"],
    # depth x init with gradient norms
    "deep": ["data=function", "data.n_samples=60", "model.depth=1,4,8", "activation=gelu,relu",
             "model.init=torch_default,auto", "seed=range(2)", "log.grad_norms=true", "log.every=1", "epochs=3"],
    # members named as in the README: 0000_activation=gelu_seed=0 ... 0003_activation=relu_seed=1
    "one": ["activation=gelu,relu", "seed=range(2)", "epochs=10"],
}
# a search with three rungs on a class table (its rung3 reads with --loss test_loss and test_acc)
SEARCH = ["data=iris", "model.hidden_dim=4", "epochs=3", "--candidates", "6", "--seeds", "1", "--tune-seeds", "2",
          "--final-seeds", "3", "--lrs", "1e-2,1e-1"]

# an example's path (or the start of one: runs/depth-study/*_model.depth=8_*) -> the fixture read
PATHS = {
    "runs/my-sweep": "real-data-tuned/tables",
    "runs/my-real-sweep": "real-data-tuned/tables",
    "runs/my-real-data-sweep": "real-data-tuned/tables",
    "runs/<sweep>": "real-data-tuned/tables",
    "results.csv": "real-data-tuned/tables/results.csv",
    "runs/diabetes-demo": "real-data-tuned/tables",
    "runs/bessel": "real-data-tuned/functions-lo",
    "runs/my-lr-sweep": "real-data-tuned/functions-lo",
    "runs/many-tasks": "real-data-tuned/functions-lo",
    "runs/mixed": "real-data-tuned/functions-lo",
    "runs/a": "real-data-tuned/functions-lo",
    "runs/b": "syn",
    "runs/digits": "classes",
    "runs/my-digits-sweep": "classes",
    "runs/classifiers": "classes",
    "runs/my-classification-sweep": "classes",
    "runs/recipe": "classes",
    "runs/cnn": "classes",
    "runs/gpt": "classes",
    "runs/mnist1d-cnn": "classes",
    "runs/my-model": "classes",
    "runs/depth-study": "deep",
    "runs/my-deep-sweep": "deep",
    "runs/depth-real-diabetes": "deep",
    "runs/depth-tuned": "real-data-tuned/functions-lo",
    "runs/<search>": "search",
    "runs/screen": "search",
    "runs/<run>": "one/0000_activation=gelu_seed=0",
    "runs/20261122-214343_gelu_normal_s0": "one/0000_activation=gelu_seed=0",
    "runs/my-sweep/0003_activation=relu_seed=1": "one/0003_activation=relu_seed=1",
}
# where one example needs another fixture than PATHS gives: (a part of the example, path, fixture, why)
PATHS_FOR = [
    ("--task data,data.target", "runs/my-sweep", "syn", "tasks by data and data.target: a sweep over both"),
]

# input files an example names, written into its working directory
FILES = {
    "houses.csv": "rooms,area,price\n" + "".join(f"{i % 5 + 1},{40 + 7 * i},{100 + 13 * i + (i % 3)}\n"
                                                 for i in range(200)),
    "flowers.csv": "petal,sepal,species\n" + "".join(f"{i % 7},{(3 * i) % 11},{['iris', 'rose', 'lily'][i % 3]}\n"
                                                     for i in range(45)),
    "my-study.yaml": "(docs/studies.md's example, shortened: see study_file)",
    "my_space.yaml": "unary: [x, 'sin(x)', 'tanh(x)']\nbinary: ['x1 + x2', 'x1 * x2', 'max(x1, x2)']\n",
}

# what needs a cluster or a server: the reason, and what the test runs instead
OFFLINE = {
    "--launcher submitit_slurm": "needs a SLURM cluster: run with --dry-run (the plugin, the grid, the config "
                                 "and the hydra.launcher.* settings are checked; nothing is submitted)",
    "--tracking-uri http://": "needs an MLflow tracking server: the slow test exports to sqlite:///mlflow.db instead",
}
# the `...` of `actbench sweep ... --launcher submitit_slurm` stands for a grid
ELLIPSIS = ["activation=gelu,relu", "seed=range(2)"]
DRAWN = "drawing a figure takes a second or more; the quick run writes a stand-in for the drawn file"
# too slow for the quick run, which checks them with --dry-run (a sweep: the grid composed and
# validated, the launcher's plugin found), up to MLflow (export: the command line, the runs read,
# the experiment and the tracking URI) or without drawing the figures (report: the page with
# everything else); test_slow_example_runs runs them in full
SLOW = {
    "--launcher joblib": "starts worker processes that import torch",
    "--launcher submitit_local": "starts worker processes that import torch",
    "--name depth-tuned": "672 members (4 depths x 2 norms x 6 activations x 7 lrs x 2 seeds): about 20 s at 2 epochs",
    "export mlflow": "MLflow's import and its SQLite store: seconds per export",
    "report ": "drawing a report's figures takes seconds: the quick run builds the page with each figure's "
               "drawing (render.report.svg) left out",
    # the quick run builds each figure and writes a stand-in file in its place (undrawn: see check); the
    # drawing of each kind is in the default run all the same: plot's curves in test_plots, --grads in
    # test_depth, --tune in test_tuned_curves, --x in test_accuracy_render and test_tune_cli, a rank
    # --plot's diagram in test_rank, plot-activations in test_plots, and my-study.yaml's own figures by
    # `study run my-study.yaml` here (which study tables writes again)
    "plot ": DRAWN,
    "plot-activations ": DRAWN,
    "study tables ": DRAWN,
}
# examples that fail as written, with the error they give until the bug is fixed; the test then
# runs them with the word replaced to check the rest, and reports them as expected failures
KNOWN_BUGS: dict[str, tuple[str, str, str]] = {}

TRAIN = {"run", "sweep", "search"}
READ = {"compare", "rank", "plot", "report", "export"}
ALONE = {"config", "activations", "plot-activations"}
STUDY = {"study"}
OUTPUT_OPTIONS = {"-o", "--output", "--plot", "--runs-dir"}
# where an example that writes into what it reads (writes_into_its_input) reads its copy of the fixtures
COPY = "fixture-copy"


def outputs(ex: Example) -> list[str]:
    """The files and folders an example writes to (relative to its working directory)."""
    out = [b for a, b in zip(ex.argv, ex.argv[1:]) if a in OUTPUT_OPTIONS]
    return out + ([ex.stdout] if ex.stdout else [])


def inputs(ex: Example) -> list[str]:
    """The paths an example reads: words (or override values) that start with runs/ or name a
    .csv/.yaml file, outputs excepted."""
    out = set(outputs(ex))
    words = [w.split("=", 1)[1] if re.match(r"[\w.+]+=", w) else w for w in ex.argv]
    return [w for w in words if w not in out and (w.startswith("runs/") or re.search(r"\.(csv|ya?ml)$", w))]


def mapped(word: str, ex: Example) -> str | None:
    """The fixture (relative to the fixture root) an example path maps to; None if none does."""
    paths = PATHS | {path: fixture for part, path, fixture, _ in PATHS_FOR if part in ex.key}
    for key in sorted(paths, key=len, reverse=True):
        if word == key or word.startswith(key + "/"):
            return paths[key] + word[len(key):]
    return None


def offline(ex: Example) -> str | None:
    return next((reason for what, reason in OFFLINE.items() if what in ex.key), None)


def test_every_example_is_covered():
    """Each example is one of the known commands, every path it reads is in PATHS or FILES, and
    every table entry is used by some example (a stale one fails)."""
    assert len(EXAMPLES) > 100
    used_paths, used_files, used_offline, used_for = set(), set(), set(), set()
    for ex in EXAMPLES.values():
        known = TRAIN | READ | ALONE | STUDY
        assert ex.argv[0] in known, f"{ex.key}: a new command; teach tests/test_examples.py to run it"
        for word in inputs(ex):
            if word in FILES:
                used_files.add(word)
                continue
            if word.startswith("docs/studies/") and (ROOT / word).is_file():
                continue  # a shipped study file, copied from the checkout
            target = mapped(word, ex)
            assert target is not None, f"{ex.key} ({ex.where[0]}): map {word} to a fixture in PATHS"
            used_paths.update(k for k in PATHS if word == k or word.startswith(k + "/"))
        used_offline.update(what for what in OFFLINE if what in ex.key)
        used_for.update(part for part, *_ in PATHS_FOR if part in ex.key)
    assert set(PATHS) - used_paths == set()
    assert set(FILES) - used_files == set()
    assert set(OFFLINE) - used_offline == set()
    assert {what for what in SLOW if not any(what in ex.key for ex in EXAMPLES.values())} == set()
    assert {what for what in KNOWN_BUGS if not any(what in ex.key for ex in EXAMPLES.values())} == set()
    assert {part for part, *_ in PATHS_FOR} - used_for == set()
    # the placeholder grid is only ever the `...` of the SLURM example
    assert [ex.key for ex in EXAMPLES.values() if "..." in ex.argv] == [
        "sweep ... --launcher submitit_slurm hydra.launcher.partition=gpu"]


# --- running them --------------------------------------------------------------------------------

def invoke(argv: list[str], ok: bool = True, process: bool = False) -> tuple[int, str, str]:
    """actbench argv in this process (or a new one): exit code, stdout and stdout + stderr."""
    if process:  # MLflow keeps a store per URI in its process: sqlite:///mlflow.db is the first cwd's
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-m", "activation_bench.cli", *argv], capture_output=True, text=True,
                              env=env)
        code, stdout, output = done.returncode, done.stdout, done.stdout + done.stderr
    else:
        result = CliRunner().invoke(app, argv)
        code, stdout, output = result.exit_code, result.stdout, result.output
    if ok:
        assert code == 0, f"actbench {shlex.join(argv)}\n{output}"
    return code, stdout, output


def _build_fixtures(folder: Path) -> None:
    """The fixture sweeps (FIXTURES) and the search, trained under folder/runs."""
    root = folder / "runs"
    for name, overrides in FIXTURES.items():
        where = root / name
        invoke(["sweep", *overrides, "model.hidden_dim=4", "--runs-dir", str(where.parent), "--name", where.name,
                "-q"])
    invoke(["search", *SEARCH, "--runs-dir", str(root), "--name", "search", "-q"])


@pytest.fixture(scope="session")
def fixture_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture sweeps (FIXTURES) and the search, under one root: trained once per test run, read
    by every worker (conftest.built_once); the examples that read them write only into their own
    working directories."""
    return built_once(tmp_path_factory, "examples", _build_fixtures) / "runs"


# the bundled classification sources of thousands of training rows: shortened with data.n_train=160
LARGE = {"data=digits", "data=mnist1d"}


def shortened(argv: list[str]) -> list[str]:
    """A training command at tiny size: epochs=2 (added if absent), seed=range(2), --candidates 20,
    data.n_train=160 on LARGE data."""
    argv = [re.sub(r"^epochs=\d+$", "epochs=2", re.sub(r"^seed=range\(\d+\)$", "seed=range(2)", w)) for w in argv]
    argv = [re.sub(r"^data.n_train=\d+$", "data.n_train=160", w) for w in argv]
    argv = ["20" if a == "--candidates" else w for a, w in zip(["", *argv], argv)]
    if argv[0] in ("run", "sweep") and not any(w.startswith("epochs=") for w in argv):
        argv.append("epochs=2")
    if argv[0] in ("run", "sweep") and LARGE & set(argv) and not any(w.startswith("data.n_train=") for w in argv):
        argv.append("data.n_train=160")  # a stratified subsample of the training rows (its full splits evaluated)
    if argv[0] in ("run", "sweep") and "model=transformer" in argv:  # steps per epoch and evaluation windows
        argv = [w for w in argv if not w.startswith(("data.steps=", "data.eval_windows="))]
        argv += ["data.steps=5", "data.eval_windows=4"]
    return argv


def prepared(ex: Example, request: pytest.FixtureRequest, full: bool) -> list[list[str]]:
    """The command lines that check an example, in order (see the module's docstring); full: an
    example of SLOW run in full rather than with --dry-run."""
    argv = [w for word in ex.argv for w in (ELLIPSIS if word == "..." else [word])]
    if argv[0] == "study":
        return _study(argv, ex, request, full)
    reads = [w for w in inputs(ex) if w not in FILES]
    if reads:
        root = request.getfixturevalue("fixture_root")
        if writes_into_its_input(ex):  # into its own copy: the fixture stays as built for every worker
            root = _copied(root, [mapped(w, ex) for w in reads], Path(COPY))  # type: ignore[misc]
        argv = [w for word in argv for w in (_read_path(root, word, ex) if word in reads else [word])]
    if "--tracking-uri" in argv and argv[argv.index("--tracking-uri") + 1].startswith("http"):
        argv[argv.index("--tracking-uri") + 1] = "sqlite:///mlflow.db"
    if argv[0] not in TRAIN:
        return [argv]
    argv = shortened(argv)
    if argv[0] == "search":
        return [["config", *overrides(argv)], [*argv, "--dry-run"]]
    if offline(ex) or (slow(ex) and not full):
        return [[*argv, "--dry-run"]]
    return [argv]


def writes_into_its_input(ex: Example) -> bool:
    """`report` without -o writes report.html into the first directory it reads."""
    return ex.argv[0] == "report" and not outputs(ex)


def _copied(root: Path, parts: list[str], to: Path) -> Path:
    """The fixtures parts (relative to root) copied to the same places under to."""
    for part in parts:
        assert not glob.has_magic(part), part
        shutil.copytree(root / part, to / part)
    return to.resolve()


def _study(argv: list[str], ex: Example, request: pytest.FixtureRequest, full: bool) -> list[list[str]]:
    """A study example: a shipped study only planned; the launchers' (SLOW) planned in the quick run;
    `study tables` after the study has run (its trained sweeps copied from my_study; `study run
    my-study.yaml` itself trains from nothing, as a user's first run does)."""
    if any(w.startswith("docs/studies/") for w in argv) or (slow(ex) not in (None, DRAWN) and not full):
        return [argv if "--dry-run" in argv else [*argv, "--dry-run"]]
    if argv[1] == "tables":
        assert argv[2] == "my-study.yaml", argv
        trained = request.getfixturevalue("my_study")
        shutil.copytree(trained / "runs", "runs", copy_function=shutil.copy2)
    return [argv]


@pytest.fixture(scope="session")
def my_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working directory of docs/studies.md's example study (study_file()) with its sweeps trained
    once per test run (conftest.built_once): my-study.yaml and its sweeps under runs/. `study run`
    trains them from a copy of the file with its sweeps only (a sweep is trained from its own entry
    alone): the tables, figures and report of the whole file, seconds of drawing that no example
    reads, are `study tables`' own to write."""
    def build(folder: Path) -> None:
        import yaml

        outputs = ("comparisons", "tables", "rankings", "figures")
        doc = {k: v for k, v in yaml.safe_load(study_file()).items() if k not in outputs}
        (folder / "my-study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        cwd = os.getcwd()
        os.chdir(folder)  # the file's runs_dir is relative to the working directory
        try:
            invoke(["study", "run", "my-study.yaml", "-q"])
        finally:
            os.chdir(cwd)
        (folder / "my-study.yaml").write_text(study_file(), encoding="utf-8")

    return built_once(tmp_path_factory, "my-study", build)


def study_file() -> str:
    """docs/studies.md's example study file with `epochs=2`."""
    text = (ROOT / "docs" / "studies.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n# my-study.yaml\n(.*?)```", text, re.S)
    assert block is not None, "docs/studies.md: the ```yaml block of my-study.yaml"
    return re.sub(r"\bepochs=\d+", "epochs=2", block.group(1))


def overrides(argv: list[str]) -> list[str]:
    return [w for w in argv[1:] if "=" in w and not w.startswith("-")]


def slow(ex: Example) -> str | None:
    return next((reason for what, reason in SLOW.items() if what in ex.key), None)


def _read_path(root: Path, word: str, ex: Example) -> list[str]:
    path = str(root / mapped(word, ex))  # type: ignore[operator]
    if not glob.has_magic(path):
        return [path]
    found = sorted(glob.glob(path))
    assert found, f"{word} matches nothing in the fixture ({path})"
    return found


def _export_without_mlflow(paths, tracking_uri=None, experiment=None, every=1, progress=None):  # noqa: ANN001, ANN202
    """export.mlflow.export up to MLflow: the experiment name checked, the runs read, the URI resolved."""
    from activation_bench.export import mlflow as ex

    if experiment is not None:
        ex.check_experiment_name(experiment)
    plan = ex.collect(paths, experiment)
    return ex.Exported(ex.resolve_uri(tracking_uri), {m.experiment: "" for m in plan.members}, skipped=plan.skipped)


def _fake_shakespeare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study: Path) -> None:
    """A study of data=shakespeare plans against a small text in the cache directory the default
    data.root points at (its checksum not tiny shakespeare's: the copy says data.sha256=null)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(cache))
    (cache / "shakespeare_char").mkdir(parents=True, exist_ok=True)
    text = "First Citizen:\nSpeak, speak.\n\n" * 800
    (cache / "shakespeare_char" / "input.txt").write_text(text, encoding="utf-8")
    plain = study.read_text(encoding="utf-8")
    study.write_text(plain.replace("data=shakespeare,", "data=shakespeare, data.sha256=null,"), encoding="utf-8")


def write_module_files(ex: Example) -> None:
    """The files a `model.target=MODULE:ATTR` imports, into the working directory: mymodels.py is
    docs/your-own-model.md's own ```python block, examples.NAME the checkout's examples/NAME.py."""
    for word in ex.argv:
        if not word.startswith("model.target="):
            continue
        module = word.split("=", 1)[1].split(":", 1)[0]
        if module == "mymodels":
            text = (ROOT / "docs" / "your-own-model.md").read_text(encoding="utf-8")
            block = re.search(r"```python\n# mymodels.py\n(.*?)```", text, re.S)
            assert block is not None, "docs/your-own-model.md: the ```python block of mymodels.py"
            Path("mymodels.py").write_text(block.group(1), encoding="utf-8")
        elif module.startswith("examples."):
            Path("examples").mkdir(exist_ok=True)
            name = module.split(".", 1)[1] + ".py"
            Path("examples", name).write_bytes((ROOT / "examples" / name).read_bytes())
        else:
            raise AssertionError(f"{ex.key}: model.target={module}: teach write_module_files where it comes from")


def check(ex: Example, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          full: bool) -> None:
    """Run ex in tmp_path (its input files written there); every file it names as output must be there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for word in inputs(ex):
        if word == "my-study.yaml":
            Path(word).write_text(study_file(), encoding="utf-8")
        elif word in FILES:
            Path(word).write_text(FILES[word], encoding="utf-8")
        elif word.startswith("docs/studies/"):
            Path(word).parent.mkdir(parents=True, exist_ok=True)
            Path(word).write_bytes((ROOT / word).read_bytes())
            if "data=shakespeare" in Path(word).read_text(encoding="utf-8"):
                _fake_shakespeare(tmp_path, monkeypatch, Path(word))
    write_module_files(ex)
    if any(w in ("data=mnist", "data=fashion_mnist", "data=cifar10") for w in ex.argv):
        from tests.test_images import write_cifar, write_mnist

        cache = tmp_path / "cache"
        monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(cache))
        write_mnist(cache, n_train=220), write_mnist(cache, "fashion_mnist", n_train=220)
        write_cifar(cache, per_batch=44)
    if ex.argv[0] == "export" and not full:
        monkeypatch.setattr("activation_bench.export.mlflow.export", _export_without_mlflow)
    if ex.argv[0] == "report" and not full:
        monkeypatch.setattr("activation_bench.render.report.svg", lambda fig, prefix, tight=False: "<svg></svg>")
    if slow(ex) == DRAWN and not full:
        leave_files_undrawn(monkeypatch)
    for out in outputs(ex):
        Path(out).parent.mkdir(parents=True, exist_ok=True)  # docs/studies/...: folders of the checkout
    bug = next((b for part, b in KNOWN_BUGS.items() if part in ex.key), None)
    for argv in prepared(ex, request, full):
        code, stdout, output = invoke(argv, ok=bug is None, process=full and argv[0] == "export")
        if code:
            message, replacement, reason = bug  # type: ignore[misc]
            assert message in output, output
            part = next(part for part in KNOWN_BUGS if part in ex.key)
            invoke([replacement if w == part else w for w in argv])
            pytest.xfail(f"known bug: {reason}")
    if ex.stdout:
        Path(ex.stdout).write_text(stdout, encoding="utf-8")
    if "--dry-run" not in argv:
        for out in outputs(ex):
            assert Path(out).exists() and (Path(out).is_dir() or Path(out).stat().st_size > 0), out
        if writes_into_its_input(ex):
            first = Path(COPY) / mapped(inputs(ex)[0], ex) / "report.html"  # type: ignore[operator]
            assert first.stat().st_size > 0, first


def same_run(ex: Example) -> tuple:
    """What an example runs, its read paths named by the fixture each maps to: two examples that read
    the same fixture under different names (runs/digits, runs/my-digits-sweep) run the same command."""
    reads = [w for w in inputs(ex) if w not in FILES]
    return tuple("fixture:" + (mapped(w, ex) or w) if w in reads else w for w in ex.argv), ex.stdout


# each distinct run once: the first key of the examples that run the same command (same_run)
DISTINCT = sorted({same_run(EXAMPLES[k]): k for k in sorted(EXAMPLES, reverse=True)}.values())


@pytest.mark.parametrize("key", DISTINCT)
def test_example_runs(key: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    check(EXAMPLES[key], request, tmp_path, monkeypatch, full=False)


@pytest.mark.slow
@pytest.mark.parametrize("key", [k for k in DISTINCT if slow(EXAMPLES[k])])
def test_slow_example_runs(key: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    check(EXAMPLES[key], request, tmp_path, monkeypatch, full=True)
