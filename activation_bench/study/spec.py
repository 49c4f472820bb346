"""A study file's schema: the dataclasses OmegaConf checks the YAML against, and the checked Study.
loading.py reads a file into them with one-line errors, checks.py checks between its parts.
Torch-free: nothing here composes a run's config (plan.py does that).

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

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

COLUMNS = ("train_loss", "train_eval_loss", "val_loss", "test_loss", "val_acc", "test_acc")  # contents.COLUMNS
TUNE_ON = ("val_loss", "val_acc")
TUNE_GRIDS = ("shared", "own")  # analysis.tune.TUNE_GRIDS (this module imports no analysis at load)
POSTHOCS = ("nemenyi", "wilcoxon")  # analysis/rank.POSTHOCS
FIGURE_KINDS = ("curves", "sensitivity")
IMAGE_FORMATS = ("png", "svg", "pdf")
TABLE_FORMATS = ("md", "csv", "json")  # every comparison, combined table and ranking is written in each
Fail = Callable[[str, str], NoReturn]  # raises the study's one-line UsageError


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
    # sequential judging (sweep --judge-seeds-max, --look-every; with tune also --margin, --loss, --baseline;
    # under judge: chosen the comparisons that tune the sweep give theirs)
    judge_seeds_max: int | None = None
    look_every: int | None = None
    margin: float | None = None
    loss: str | None = None  # the column the verdicts judge (default: compare's for the metric)
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
