"""The checks between a study file's parts (spec.py's schema): references, names, tuned sweeps and
sequential judging, and every value that is checked without composing configs. Torch-free."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn

from activation_bench.errors import UsageError
from activation_bench.study.spec import (
    COLUMNS,
    FIGURE_KINDS,
    IMAGE_FORMATS,
    POSTHOCS,
    TABLE_FORMATS,
    TUNE_GRIDS,
    TUNE_ON,
    Fail,
    FigureSpec,
    StudySpec,
    SweepSpec,
    TuneFields,
)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=,-]*\Z")



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
    _check_sequential(fail, spec, key, sw)
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


SEQUENTIAL = ("judge_seeds_max", "look_every", "margin", "loss", "baseline")


def _check_sequential(fail: Fail, spec: StudySpec, key: str, sw: SweepSpec) -> None:
    """Sequential judging on a sweep (judge_seeds_max and look_every): with its own tune, its own margin
    (loss and baseline optional: the verdicts it stops on); with judge: chosen, each comparison that
    tunes it judges with its own margin, loss and baseline, reads it alone, and no ranking reads it
    (a ranking has no verdict to stop on)."""
    given = [k for k in SEQUENTIAL if getattr(sw, k) is not None]
    if not given:
        return
    if not sw.staged:
        fail(f"{key}.{given[0]}", "sequential judging adds judging seeds at a tuned sweep's choices: give it "
             "tune: [KEY] (or judge: chosen)")
    if sw.judge_seeds_max is None or sw.look_every is None:
        fail(f"{key}.{given[0]}", "sequential judging: give judge_seeds_max and look_every (and, with tune, margin)")
    if sw.look_every < 1 or sw.judge_seeds_max < 2:
        fail(f"{key}.look_every", "at least 1 seed a look and 2 judging seeds in all")
    if sw.loss is not None and sw.loss not in COLUMNS:
        fail(f"{key}.loss", f"'{sw.loss}'; valid: {', '.join(COLUMNS)}")
    if sw.tune:
        if sw.margin is None:
            fail(f"{key}.{given[0]}", "sequential judging stops a verdict once decided against a margin: give "
                 "margin too")
        _margin(fail, f"{key}.margin", f"{sw.margin:g}", sw.loss)
        _loss_metric(fail, key, sw.metric or "final")
        return
    name = key.removeprefix("sweeps.")
    own = [k for k in ("margin", "loss", "baseline") if getattr(sw, k) is not None]
    if own:
        fail(f"{key}.{own[0]}", "judge: chosen: the comparisons that tune the sweep judge it, each with its own "
             "margin, loss and baseline")
    for n, r in spec.rankings.items():
        if name in r.sweeps:
            fail(f"rankings.{n}", f"reads sweep {name}, judged sequentially: a ranking has no verdict to stop on "
                 "(judge the sweep without judge_seeds_max, or rank another)")
    for n, c in spec.comparisons.items():
        if name not in c.sweeps:
            continue
        if c.sweeps != [name]:
            fail(f"comparisons.{n}.sweeps", f"reads sweep {name}, judged sequentially, with others: a comparison "
                 "that stops a sweep's seeds reads it alone")
        if c.margin is None:
            fail(f"comparisons.{n}.margin", f"sweep {name} is judged sequentially by the comparisons that tune it: "
                 "give this one a margin (the verdicts it stops on)")
        _loss_metric(fail, f"comparisons.{n}", c.metric)


def _loss_metric(fail: Fail, key: str, metric: str) -> None:
    """Sequential verdicts read a value of the column (a loss or an accuracy), not to=EPS's epochs."""
    from activation_bench.analysis.metrics import parse_metric

    try:
        m = parse_metric(metric)
    except UsageError:
        return  # _check_analysis names it
    if not m.is_loss:
        fail(f"{key}.metric", f"{metric}: sequential judging reads a loss or an accuracy against its margin, not an "
             "epoch count")


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
