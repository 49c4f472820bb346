"""A study file: the schema (dataclasses OmegaConf checks the YAML against), loading it with one-line
errors, and the checks between its parts. Torch-free: nothing here composes a run's config (plan.py
does that).

    title: GELU vs ReLU, tuned
    runs_dir: runs/my-study          # sweeps go to RUNS_DIR/<sweep>, relative to the working directory
    output: tables                   # tables, figures and report.html; relative to the study file
    sweeps:
      mnist1d:
        grid: ['activation=gelu,relu', 'lr=1e-3,1e-2', 'seed=range(10)']
        overrides: [data=mnist1d, epochs=20]
    comparisons:
      test-acc: {sweeps: [mnist1d], metric: early_stop, loss: test_acc, tune: [lr], tune_seeds: 4,
                 tune_on: val_acc, baseline: activation=relu}
    tables:
      test: {comparisons: [test-acc, test-loss]}
    rankings: ...
    figures:
      curves: {sweeps: [mnist1d], loss: val_loss, tuned: test-acc}
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from activation_bench.errors import UsageError

COLUMNS = ("train_loss", "train_eval_loss", "val_loss", "test_loss", "val_acc", "test_acc")  # contents.COLUMNS
TUNE_ON = ("val_loss", "val_acc")
TUNE_GRIDS = ("shared", "own")  # analysis.tune.TUNE_GRIDS (this module imports no analysis at load)
POSTHOCS = ("nemenyi", "wilcoxon")  # analysis/rank.POSTHOCS
FIGURE_KINDS = ("curves", "sensitivity")
IMAGE_FORMATS = ("png", "svg", "pdf")
TABLE_FORMATS = ("md", "csv", "json")  # every comparison, combined table and ranking is written in each
Fail = Callable[[str, str], NoReturn]  # raises the study's one-line UsageError
MAX_NODES = 100_000  # values in a study file with its aliases expanded (the largest shipped: a few hundred)
MAX_DEPTH = 50  # nesting levels (a study file uses 4)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=,-]*\Z")


@dataclass
class TuneFields:
    tune: list[str] | None = None  # swept keys tuned per group (compare --tune)
    tune_seeds: int | None = None
    tune_on: str | None = None  # val_loss | val_acc
    tune_grid: str | None = None  # shared | own (compare --tune-grid)


@dataclass
class SweepSpec(TuneFields):
    """A sweep; tuned (tune, then judge: docs/tuning.md) where it declares `tune` (with `metric`, the
    metric of the choice, as sweep --tune's) or has `judge: chosen` (the comparisons and rankings that
    tune it choose; its judging seeds train at the union of their choices)."""

    grid: list[str] = field(default_factory=list)  # overrides in the sweep grammar (comma lists, range(), ...)
    overrides: list[str] = field(default_factory=list)  # fixed settings, appended to the grid
    dir: str | None = None  # the sweep's directory under runs_dir (default: the sweep's name)
    judge: str | None = None  # all (every seed at every grid value) | chosen (the judging seeds at the choices)
    metric: str | None = None  # with tune: what the choice applies to the validation column (default final)
    halving: int | None = None  # with tune: successive halving's ETA in the tuning stage (sweep --halving)
    # with tune: sequential judging (sweep --judge-seeds-max, --look-every, --margin, --baseline)
    judge_seeds_max: int | None = None
    look_every: int | None = None
    margin: float | None = None
    baseline: str | None = None

    @property
    def staged(self) -> bool:
        return bool(self.tune) or self.judge == "chosen"


@dataclass
class ComparisonSpec(TuneFields):
    sweeps: list[str] = field(default_factory=list)
    metric: str = "final"
    loss: str | None = None
    by: list[str] | None = None
    baseline: str | None = None  # KEY=VALUE
    pair_by: list[str] | None = None  # compare --pair-by
    power: str | None = None  # compare --power RATIO
    margin: str | None = None  # compare --margin X: a ratio on a loss, percentage points on an accuracy
    title: str | None = None


@dataclass
class TableSpec:
    """Several comparisons side by side, one row per group (the comparisons must group alike)."""

    comparisons: list[str] = field(default_factory=list)
    title: str | None = None


@dataclass
class RankingSpec(TuneFields):
    sweeps: list[str] = field(default_factory=list)
    metric: str = "final"
    loss: str | None = None
    by: str = "activation"
    task: list[str] | None = None
    posthoc: str = "nemenyi"
    alpha: float = 0.05
    plot: bool = True  # the critical-difference diagram, NAME-cd.svg
    title: str | None = None


@dataclass
class FigureSpec:
    sweeps: list[str] = field(default_factory=list)
    kind: str = "curves"  # curves (median and IQR band per epoch) | sensitivity (the metric against x)
    loss: str | None = None
    by: list[str] | None = None
    tuned: str | None = None  # curves: each group at the value this comparison's tuning chose
    x: str | None = None  # sensitivity: the swept key on the x axis
    metric: str | None = None  # sensitivity: the metric drawn
    format: str = "svg"
    title: str | None = None


@dataclass
class StudySpec:
    title: str = ""
    description: str = ""
    runs_dir: str = "runs"
    output: str = "."
    report: str = "report.html"  # the page's file name (two studies sharing a folder name theirs apart)
    # torch's intra-op threads for training: CPU results are bit-identical at a fixed count only
    # (docs/reproducibility.md), so a study published at one count names it; None: torch's default
    threads: int | None = None
    sweeps: dict[str, SweepSpec] = field(default_factory=dict)
    comparisons: dict[str, ComparisonSpec] = field(default_factory=dict)
    tables: dict[str, TableSpec] = field(default_factory=dict)
    rankings: dict[str, RankingSpec] = field(default_factory=dict)
    figures: dict[str, FigureSpec] = field(default_factory=dict)


@dataclass
class Study:
    """A checked study: its spec, the file it came from and where it reads and writes."""

    spec: StudySpec
    path: Path
    text: str  # the file as written (shown in the report)
    runs_dir: Path
    output: Path

    def sweep_dir(self, name: str) -> Path:
        return self.runs_dir / (self.spec.sweeps[name].dir or name)

    def files(self) -> list[str]:
        """Every file the study writes into its output folder, in writing order."""
        s = self.spec
        out = [f"{n}.{ext}" for group in (s.comparisons, s.tables) for n in group for ext in TABLE_FORMATS]
        for n, r in s.rankings.items():
            out += [f"{n}.{ext}" for ext in TABLE_FORMATS] + ([f"{n}-cd.svg"] if r.plot else [])
        out += [f"{n}.{f.format}" for n, f in s.figures.items()]
        return [*out, s.report]


def load(path: Path, runs_dir: Path | None = None, output: Path | None = None) -> Study:
    """Read, validate and check a study file; every problem is one UsageError line naming the key."""
    if not path.is_file():
        raise UsageError(f"{path}: no such study file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    spec = _validated(path, _parse(path, text))
    check(spec, path)
    out = output if output is not None else _output_dir(path, spec.output)
    return Study(spec, path, text, runs_dir if runs_dir is not None else _runs_dir(path, spec.runs_dir), out)


def _parse(path: Path, text: str) -> dict:
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        """YAML that refuses a key given twice (PyYAML keeps the last one silently)."""

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            if key in seen:
                raise UsageError(f"{path}: line {key_node.start_mark.line + 1}: key '{key}' given twice")
            seen.add(key)
        return loader.construct_mapping(node)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        doc = yaml.load(text, Loader=UniqueKeys)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{path}: not a YAML study file: {where}{problem}") from None
    except RecursionError:
        raise UsageError(f"{path}: not a YAML study file: nested too deeply") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: a study file is a YAML mapping (title, sweeps, comparisons, ...), "
                         f"not {type(doc).__name__}")
    _check_size(path, doc)
    return doc


def _check_size(path: Path, doc: Any) -> None:
    """Refuse a document whose aliases refer to themselves (`a: &a [*a]`) or expand past
    MAX_NODES values (aliases of aliases: each expansion multiplies the size): checking either
    against the schema would recurse without end or exhaust memory. Sizes are counted once per
    object, so the count itself is linear in the file."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in open_:
            raise UsageError(f"{path}: a YAML alias refers to the value that holds it (an endless value)")
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise UsageError(f"{path}: nested more than {MAX_DEPTH} levels deep")
        open_.add(key)
        items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1 + sum(size(x, depth + 1) for x in items)
        open_.discard(key)
        if total > MAX_NODES:
            raise UsageError(f"{path}: more than {MAX_NODES:,} values once its aliases are expanded")
        sizes[key] = total
        return total

    size(doc, 0)


def _validated(path: Path, doc: dict) -> StudySpec:
    """The document merged into the schema: unknown keys and wrong types refused, naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from activation_bench.data.shapes import register_resolver

    register_resolver()  # overrides' ${data:NAME} stay as written, filled in per member (docs/your-own-model.md)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(StudySpec), doc)
        spec = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or ""
        msg = str(getattr(exc, "msg", None) or exc).splitlines()[0]
        if msg.startswith("Key '") and " not in " in msg:
            msg = f"unknown key (valid: {_valid_keys(key)})"
        raise UsageError(f"{path}: {key or '(top level)'}: {msg}") from None
    assert isinstance(spec, StudySpec)
    return spec


def _valid_keys(full_key: str) -> str:
    """The keys the schema allows where full_key is (its parent's fields)."""
    from dataclasses import fields

    parts = full_key.split(".")
    kinds = {"sweeps": SweepSpec, "comparisons": ComparisonSpec, "tables": TableSpec, "rankings": RankingSpec,
             "figures": FigureSpec}
    cls = kinds.get(parts[0]) if len(parts) == 3 else StudySpec
    return ", ".join(f.name for f in fields(cls or StudySpec))


def _runs_dir(path: Path, runs_dir: str) -> Path:
    """The file's runs_dir, relative to the working directory and under it: a study file (perhaps
    someone else's) writes its runs where a user runs it, as its outputs stay in its own folder;
    --runs-dir trains anywhere."""
    rel = Path(runs_dir)
    if not runs_dir or rel.is_absolute() or ".." in rel.parts or runs_dir.startswith("~"):
        raise UsageError(f"{path}: runs_dir: '{runs_dir}' must be a folder under the working directory "
                         "(relative, no '..'); give --runs-dir DIR to train elsewhere")
    return rel


def _output_dir(path: Path, output: str) -> Path:
    """The output folder, relative to the study file's folder and inside it."""
    rel = Path(output)
    if rel.is_absolute() or ".." in rel.parts:
        raise UsageError(f"{path}: output: '{output}' must be a folder inside the study file's folder "
                         "(relative, no '..'); give --output DIR to write elsewhere")
    return path.parent / rel


def check(spec: StudySpec, path: Path) -> None:
    """References between the parts, names, and every value that is checked without composing configs."""
    def fail(key: str, msg: str) -> NoReturn:
        raise UsageError(f"{path}: {key}: {msg}")

    if not spec.sweeps:
        fail("sweeps", "a study needs at least one sweep")
    if spec.threads is not None and spec.threads < 1:
        fail("threads", f"{spec.threads}: a count of torch threads, 1 or more")
    dirs: dict[str, str] = {}
    for name, sw in spec.sweeps.items():
        _check_name(fail, f"sweeps.{name}", name)
        if not sw.grid and not sw.overrides:
            fail(f"sweeps.{name}.grid", "empty: give overrides in the sweep grammar, e.g. 'seed=range(10)'")
        _check_tuned_sweep(fail, spec, name, sw)
        folder = sw.dir or name
        _check_name(fail, f"sweeps.{name}.dir", folder)
        if folder in dirs:
            fail(f"sweeps.{name}", f"writes the same directory '{folder}' as sweep '{dirs[folder]}'")
        dirs[folder] = name
    for group in ("comparisons", "tables", "rankings", "figures"):
        for name in getattr(spec, group):
            _check_name(fail, f"{group}.{name}", name)
    for name, c in spec.comparisons.items():
        _check_sweeps(fail, spec, f"comparisons.{name}", c.sweeps)
        _check_analysis(fail, f"comparisons.{name}", c.metric, c.loss, c)
        if c.baseline is not None and "=" not in c.baseline:
            fail(f"comparisons.{name}.baseline", f"'{c.baseline}': expected KEY=VALUE, e.g. activation=relu")
        if c.power is not None:
            _number(fail, f"comparisons.{name}.power", c.power)
        if c.margin is not None:
            _margin(fail, f"comparisons.{name}.margin", c.margin, c.loss)
    for name, t in spec.tables.items():
        if len(t.comparisons) < 2:
            fail(f"tables.{name}.comparisons", "a combined table puts two or more comparisons side by side")
        for c in t.comparisons:
            if c not in spec.comparisons:
                fail(f"tables.{name}.comparisons", f"no comparison '{c}' in this study ({_names(spec.comparisons)})")
    for name, r in spec.rankings.items():
        _check_sweeps(fail, spec, f"rankings.{name}", r.sweeps)
        _check_analysis(fail, f"rankings.{name}", r.metric, r.loss, r)
        if r.posthoc not in POSTHOCS:
            fail(f"rankings.{name}.posthoc", f"'{r.posthoc}'; valid: {', '.join(POSTHOCS)}")
        if not 0 < r.alpha < 1:
            fail(f"rankings.{name}.alpha", f"{r.alpha}: a significance level between 0 and 1")
    for name, f in spec.figures.items():
        _check_figure(fail, spec, name, f)
    _check_name(fail, "report", spec.report)
    if not spec.report.endswith(".html"):
        fail("report", f"'{spec.report}': the page's file name ends in .html")
    _check_files(fail, spec)


JUDGE = ("all", "chosen")


def _check_tuned_sweep(fail: Fail, spec: StudySpec, name: str, sw: SweepSpec) -> None:
    """A tuned sweep: its own rule checked as a comparison's; `judge: chosen` needs a comparison or
    ranking that tunes it; every comparison and ranking reading it tunes (its judging seeds hold the
    chosen values only)."""
    key = f"sweeps.{name}"
    if sw.judge is not None and sw.judge not in JUDGE:
        fail(f"{key}.judge", f"'{sw.judge}'; valid: {', '.join(JUDGE)}")
    if sw.metric is not None and not sw.tune:
        fail(f"{key}.metric", "the metric of a sweep's own choice: give tune: [KEY] too (or judge: chosen, where "
             "the comparisons that tune it choose)")
    _check_analysis(fail, key, sw.metric, None, sw)
    if sw.tune and sw.judge == "all":
        fail(f"{key}.judge", "all: a sweep that declares tune trains its judging seeds at the chosen values only")
    if sw.halving is not None and not sw.tune:
        fail(f"{key}.halving", "successive halving prunes by the sweep's own choice: give it tune: [KEY] too")
    _check_sequential(fail, key, sw)
    if sw.halving is not None and sw.halving < 2:
        fail(f"{key}.halving", f"{sw.halving}: keeps the best 1/ETA of each group's settings at each rung; 2 or more")
    if not sw.staged:
        return
    readers = [(f"{g}.{n}", part) for g in ("comparisons", "rankings") for n, part in getattr(spec, g).items()
               if name in part.sweeps]
    untuned = [k for k, part in readers if not part.tune]
    if sw.halving is not None:  # only the settings that reached the end have whole runs to choose among
        untuned += [f"{k}.tune_grid" for k, part in readers if part.tune and part.tune_grid != "own"]
    if untuned and untuned[0].endswith(".tune_grid"):
        fail(untuned[0], f"reads sweep {name}, halved: give it tune_grid: own (each group chooses among the "
             "settings that reached the last rung)")
    if untuned:
        fail(untuned[0], f"reads sweep {name}, whose judging seeds train at the chosen values only: tune it too "
             "(tune: [KEY]), or give the sweep judge: all")
    if not sw.tune and not readers:
        fail(f"{key}.judge", "chosen: no comparison or ranking tunes this sweep (give it tune: [KEY], or a "
             "comparison with tune)")


def _check_sequential(fail: Fail, key: str, sw: SweepSpec) -> None:
    """Sequential judging on a sweep: with its own tune, all of judge_seeds_max, look_every and margin."""
    given = [k for k in ("judge_seeds_max", "look_every", "margin", "baseline") if getattr(sw, k) is not None]
    if not given:
        return
    if not sw.tune:
        fail(f"{key}.{given[0]}", "sequential judging adds judging seeds at the sweep's own choice: give it "
             "tune: [KEY]")
    if sw.margin is None:
        fail(f"{key}.{given[0]}", "sequential judging stops a verdict once decided against a margin: give margin too")
    if sw.judge_seeds_max is None or sw.look_every is None:
        fail(f"{key}.margin", "sequential judging: give judge_seeds_max and look_every too")
    if not sw.margin > 0:
        fail(f"{key}.margin", f"{sw.margin}: a ratio above 0 on a loss, percentage points on an accuracy")
    if sw.look_every < 1 or sw.judge_seeds_max < 2:
        fail(f"{key}.look_every", "at least 1 seed a look and 2 judging seeds in all")


def _check_name(fail: Fail, key: str, name: str) -> None:
    if not _NAME.match(str(name)) or name in (".", ".."):
        fail(key, f"'{name}' is not a usable name: letters, digits and . _ + = , - (it names a file or folder)")


def _names(group: dict) -> str:
    return ", ".join(group) or "none defined"


def _check_sweeps(fail: Fail, spec: StudySpec, key: str, sweeps: list[str]) -> None:
    if not sweeps:
        fail(f"{key}.sweeps", "name the sweeps it reads")
    for s in sweeps:
        if s not in spec.sweeps:
            fail(f"{key}.sweeps", f"no sweep '{s}' in this study ({_names(spec.sweeps)})")


def _check_analysis(fail: Fail, key: str, metric: str | None, loss: str | None, tune: TuneFields) -> None:
    from activation_bench.analysis.metrics import parse_metric

    if metric is not None:
        try:
            parse_metric(metric)
        except UsageError as exc:
            fail(f"{key}.metric", str(exc))
    if loss is not None and loss not in COLUMNS:
        fail(f"{key}.loss", f"'{loss}'; valid: {', '.join(COLUMNS)}")
    if tune.tune_on is not None and tune.tune_on not in TUNE_ON:
        fail(f"{key}.tune_on", f"'{tune.tune_on}'; valid: {', '.join(TUNE_ON)}")
    if tune.tune_grid is not None and tune.tune_grid not in TUNE_GRIDS:
        fail(f"{key}.tune_grid", f"'{tune.tune_grid}'; valid: {', '.join(TUNE_GRIDS)}")
    if (tune.tune_seeds is not None or tune.tune_on is not None or tune.tune_grid is not None) and not tune.tune:
        fail(f"{key}.tune", "tune_seeds, tune_on and tune_grid set up tuning: name the tuned keys too, e.g. tune: [lr]")
    if tune.tune_seeds is not None and tune.tune_seeds < 1:
        fail(f"{key}.tune_seeds", f"{tune.tune_seeds}: at least 1")


def _number(fail: Fail, key: str, text: str) -> None:
    try:
        float(text)
    except ValueError:
        fail(key, f"'{text}' is not a number")


def _margin(fail: Fail, key: str, text: str, loss: str | None) -> None:
    """compare --margin's check: a ratio on a loss, percentage points on an accuracy, never negative."""
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.verdicts import parse_margin

    try:
        parse_margin(text, accuracy=is_accuracy(loss or ""))
    except UsageError as exc:
        fail(key, str(exc).removeprefix(f"--margin {text}: "))


def _check_figure(fail: Fail, spec: StudySpec, name: str, f: FigureSpec) -> None:
    key = f"figures.{name}"
    _check_sweeps(fail, spec, key, f.sweeps)
    if f.kind not in FIGURE_KINDS:
        fail(f"{key}.kind", f"'{f.kind}'; valid: {', '.join(FIGURE_KINDS)}")
    if f.format not in IMAGE_FORMATS:
        fail(f"{key}.format", f"'{f.format}'; valid: {', '.join(IMAGE_FORMATS)}")
    if f.loss is not None and f.loss not in COLUMNS:
        fail(f"{key}.loss", f"'{f.loss}'; valid: {', '.join(COLUMNS)}")
    if f.kind == "sensitivity":
        if not f.x:
            fail(f"{key}.x", "a sensitivity figure draws the metric against a swept key: give x, e.g. x: lr")
        if f.tuned is not None:
            fail(f"{key}.tuned", "tuned curves are drawn by kind: curves")
        _check_analysis(fail, key, f.metric, None, TuneFields())
    else:
        for field_name in ("x", "metric"):
            if getattr(f, field_name) is not None:
                fail(f"{key}.{field_name}", "applies to kind: sensitivity (curves show every epoch)")
        if f.tuned is not None and f.tuned not in spec.comparisons:
            fail(f"{key}.tuned", f"no comparison '{f.tuned}' in this study ({_names(spec.comparisons)})")
        if f.tuned is not None and not spec.comparisons[f.tuned].tune:
            fail(f"{key}.tuned", f"comparison '{f.tuned}' tunes nothing: give it tune: [KEY]")


def _check_files(fail: Fail, spec: StudySpec) -> None:
    """Two parts writing the same output file (a comparison and a table of one name, say)."""
    seen: dict[str, str] = {spec.report: "the report"}
    for group in ("comparisons", "tables", "rankings", "figures"):
        for name, part in getattr(spec, group).items():
            files = [f"{name}.{part.format}"] if group == "figures" else [f"{name}.{ext}" for ext in TABLE_FORMATS]
            if group == "rankings" and part.plot:
                files.append(f"{name}-cd.svg")
            for file in files:
                if file in seen:
                    fail(f"{group}.{name}", f"writes {file}, as {seen[file]} does: choose another name")
                seen[file] = f"{group}.{name}"
