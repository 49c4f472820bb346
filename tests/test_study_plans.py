"""The shipped tuned studies of docs/tuning.md's "The shipped tuned studies": the members and
member-epochs their headers and pages give, for the full grid and for tune then judge at the
published choices, recounted from the study file's grids and the published tables' chosen values.
Real data trains its full grid (a file switched to `judge: chosen` fails here: its header, page and
docs/tuning.md's table then say something else); depth's tuned study trains the plan."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from activation_bench.config.grid import expand

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "docs" / "studies"


@dataclass
class Counts:
    members: int = 0
    epochs: int = 0

    def add(self, epochs: int) -> None:
        self.members += 1
        self.epochs += epochs


def _fixed(overrides: list[str], key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")), None)


def _chosen(folder: Path, doc: dict) -> dict[str, list[tuple[list[str], set[tuple]]]]:
    """Per sweep, for each tuned comparison reading it: its group columns and the published
    (group values..., chosen lr) of every group."""
    out: dict[str, list[tuple[list[str], set[tuple]]]] = {}
    for name, comp in doc["comparisons"].items():
        assert comp.get("tune") == ["lr"], name
        table = pd.read_csv(folder / f"{name}.csv", dtype=str, keep_default_na=False)
        cols = [c for c in table.columns[: list(table.columns).index("lr")] if c != "params"]
        keys = {(*row[:-1], round(float(row[-1]), 12)) for row in table[[*cols, "lr"]].itertuples(index=False)}
        for sweep in comp["sweeps"]:
            out.setdefault(sweep, []).append((cols, keys))
    return out


def _judged_at_a_choice(member: dict[str, str], tables: list[tuple[list[str], set[tuple]]]) -> bool:
    lr = round(float(member["lr"]), 12)
    return any((*(member[c] for c in cols), lr) in keys for cols, keys in tables)


@functools.cache
def plan(study: str) -> dict[str, Counts]:
    """The full grid, its tuning members, its judging members at the published choices and, apart,
    its judging members at lr 1e-3 (real data's fixed-* tables)."""
    path = STUDIES / study
    doc = yaml.safe_load(path.read_text())
    k = {c["tune_seeds"] for c in doc["comparisons"].values()}
    assert len(k) == 1
    tune_seeds = k.pop()
    chosen = _chosen(path.parent, doc)
    counts = {part: Counts() for part in ("full", "tuning", "judging", "fixed")}
    for name, sweep in doc["sweeps"].items():
        assert "tune" not in sweep, f"{study}: {name} has its own rule: update its counts"
        grid = expand([*sweep["grid"], *sweep["overrides"]])
        epochs = int(_fixed(grid.common, "epochs"))
        for overrides in grid.members:
            member = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides}
            lr = float(member["lr"])
            counts["full"].add(epochs)
            if int(member["seed"]) < tune_seeds:
                counts["tuning"].add(epochs)
                continue
            if _judged_at_a_choice(member, chosen[name]):
                counts["judging"].add(epochs)
            if np.isclose(lr, 1e-3):
                counts["fixed"].add(epochs)
    return counts


def _says(text: str, *numbers: int) -> None:
    for n in numbers:
        assert f"{n:,}" in text, n


@pytest.mark.parametrize("study", ["real-data/study.yaml", "depth/tuned.yaml"])
def test_a_study_says_what_it_trains_and_what_tune_then_judge_would(study):
    judge = {s.get("judge", "all") for s in yaml.safe_load((STUDIES / study).read_text())["sweeps"].values()}
    assert judge == ({"all"} if study.startswith("real-data") else {"chosen"})
    c = plan(study)
    full, tuning, judging = c["full"], c["tuning"], c["judging"]
    both = Counts(tuning.members + judging.members, tuning.epochs + judging.epochs)
    rest = Counts(full.members - both.members, full.epochs - both.epochs)
    header = (STUDIES / study).read_text().split("\ntitle:")[0]
    page = (STUDIES / study).parent.joinpath("README.md").read_text()
    tuning_md = (ROOT / "docs" / "tuning.md").read_text().split("## The shipped tuned studies")[1].split("\n## ")[0]
    for text in (header, page, tuning_md):
        _says(text, full.members, full.epochs, both.members, both.epochs, judging.members, rest.members)
    _says(header, tuning.members, rest.epochs)
    if study.startswith("real-data"):
        # the verdicts at lr 1e-3 (fixed-*) read judging members that no group chose
        tables = _chosen(STUDIES / "real-data", yaml.safe_load((STUDIES / study).read_text()))
        assert not any(lr == 1e-3 for ts in tables.values() for _, keys in ts for *_, lr in keys)
        _says(header, c["fixed"].members, c["fixed"].epochs)
        _says(page, c["fixed"].members, c["fixed"].epochs)


def test_the_counts_are_the_documented_ones():
    """The numbers of docs/tuning.md's table, in one place (the real data's ranking chooses as its
    comparisons do: the same rule on the same runs)."""
    rd, depth = plan("real-data/study.yaml"), plan("depth/tuned.yaml")
    assert (rd["full"].members, rd["full"].epochs) == (12_480, 990_080)
    assert (rd["tuning"].members, rd["judging"].members) == (2_880, 1_200)
    assert rd["tuning"].epochs + rd["judging"].epochs == 323_680
    assert (rd["fixed"].members, rd["fixed"].epochs) == (1_200, 95_200)
    assert (depth["full"].members, depth["full"].epochs) == (6_720, 2_016_000)
    assert (depth["tuning"].members, depth["judging"].members) == (1_680, 1_170)
    assert depth["tuning"].epochs + depth["judging"].epochs == 855_000
