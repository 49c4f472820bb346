"""Tune, then judge: a tuned sweep trains its tuning seeds over the whole grid, chooses each group's
values with `compare --tune`'s own code (analysis/tune.py: `choose`), then trains its judging seeds at
the chosen values only. Each stage is an ordinary list of the sweep's members (plan indices), so
resuming, stacking, checkpoints and launchers work as for any sweep; the choice is recomputed from
the tuning seeds' finished runs every time (it is cheap and deterministic) and written, with its
scores, into the sweep's folder (tuning.json, tuning.csv).

A study may tune one sweep by several comparisons (the accuracy table on val_acc, the loss table on
val_loss), or read several sweeps in one comparison: a `Tuning` names the plans it reads, and a plan's
judging members are the union of what its tunings choose. Torch-free: the analysis layer decides.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from activation_bench.errors import UsageError
from activation_bench.runs import store

if TYPE_CHECKING:
    from activation_bench.analysis.selection import Selection
    from activation_bench.analysis.tune import TuneSpec
    from activation_bench.runs.orchestrate import SweepPlan

CHOICE_FILE = "tuning.json"
SCORES_FILE = "tuning.csv"


@dataclass(frozen=True)
class Tuning:
    """One choice rule: compare --tune's options (`spec`), the metric it chooses by, compare's --by
    (None: every varying column but the seed), the plans it reads (indices into the plan list) and
    its name (the comparison it comes from, or "sweep")."""

    spec: TuneSpec
    metric: str = "final"
    by: tuple[str, ...] | None = None
    sweeps: tuple[int, ...] = (0,)
    name: str = "sweep"
    halving: int | None = None  # successive halving's ETA in the tuning stage (cli/tuned.run_halving)

    def record(self) -> dict:
        s = self.spec
        return {"name": self.name, "tune": list(s.keys), "tune_seeds": s.tune_seeds, "tune_on": s.on,
                "tune_grid": s.grid, "metric": self.metric, "by": list(self.by) if self.by else None,
                **({"halving": self.halving} if self.halving else {})}


@dataclass
class Choice:
    """A tuning's outcome: its seeds, the Selection and, per plan, the judging members it needs."""

    tuning: Tuning
    tune_seeds: list[str]
    judge_seeds: list[str]
    selection: Selection
    judging: dict[int, list[int]]


def member_seed(p: SweepPlan, i: int) -> str:
    return str(p.cfgs[i].seed)


def seeds(plans: Sequence[SweepPlan], t: Tuning) -> tuple[list[str], list[str]]:
    """(tuning seeds, judging seeds) of a tuning over its plans: compare's split (the K smallest tune)."""
    from activation_bench.analysis.tune import split_seeds

    return split_seeds([member_seed(plans[k], i) for k in t.sweeps for i in range(len(plans[k].members))],
                       t.spec.tune_seeds)


def check(plans: Sequence[SweepPlan], t: Tuning, flag: str = "--tune") -> None:
    """One line, before anything is trained: a tuned key the plans do not vary, a tuned key that is
    also a --by column, seeds that leave fewer than 2 judging seeds (compare's own rule)."""
    from activation_bench.analysis.loading import fixed_values

    for key in t.spec.keys:
        swept = any(key in plans[k].keys for k in t.sweeps)
        fixed = {fixed_values(plans[k].overrides).get(key) for k in t.sweeps} - {None}
        if not swept and len(fixed) < 2:
            have = ", ".join(dict.fromkeys(k for j in t.sweeps for k in plans[j].keys if k != "seed")) or "nothing"
            raise UsageError(f"{flag} {key}: the grid does not vary '{key}' (it varies: {have}); tuning chooses "
                             "among a key's values")
    seeds(plans, t)


def tuning_members(plans: Sequence[SweepPlan], tunings: Sequence[Tuning]) -> dict[int, list[int]]:
    """Per tuned plan the members of stage 1: every member on a tuning seed of a tuning reading it."""
    wanted: dict[int, set[str]] = {}
    for t in tunings:
        tune_s, _ = seeds(plans, t)
        for k in t.sweeps:
            wanted.setdefault(k, set()).update(tune_s)
    return {k: [i for i in range(len(plans[k].members)) if member_seed(plans[k], i) in s]
            for k, s in wanted.items()}


def choose(plans: Sequence[SweepPlan], t: Tuning, floor: float | None = None) -> Choice:
    """The choice from the finished tuning-seed members of the tuning's plans (their results.csv must
    be up to date: orchestrate.build_results), and the judging members it needs."""
    import numpy as np

    from activation_bench.analysis import tune
    from activation_bench.analysis.compare import resolve_groups
    from activation_bench.analysis.loading import load
    from activation_bench.analysis.metrics import FLOOR, parse_metric
    from activation_bench.runs.orchestrate import done_hashes

    tune_s, judge_s = seeds(plans, t)
    dirs = [plans[k].directory for k in t.sweeps]
    loaded = load([str(d) for d in dirs])
    # the runs of the plans' members only (a folder may hold runs of an earlier grid)
    member_of: dict[tuple[str, str], tuple[int, int]] = {}
    for k in t.sweeps:
        index = {h: i for i, h in enumerate(plans[k].hashes)}
        for h, (run_dir, _) in done_hashes(plans[k].directory).items():
            if h in index:
                member_of[(str(plans[k].directory), run_dir.name)] = (k, index[h])
    where = [member_of.get((str(s), str(r))) for s, r in zip(loaded.runs["source"], loaded.runs["run"])]
    keep = np.array([w is not None for w in where])
    group_cols = [c for c in resolve_groups(loaded, list(t.by) if t.by else None) if c not in t.spec.keys]
    sel = tune.choose(loaded, parse_metric(t.metric), group_cols, t.spec, tune_s, judge_s,
                      FLOOR if floor is None else floor, keep)
    return Choice(t, tune_s, judge_s, sel, _judging(plans, t, sel, loaded, where, judge_s))


def _judging(plans: Sequence[SweepPlan], t: Tuning, sel: Selection, loaded, where: list, judge_s: list[str]
             ) -> dict[int, list[int]]:
    """Per plan, its members on the judging seeds whose labels (all but the seed) are those of a
    tuning-seed member at its group's chosen values."""
    from activation_bench.analysis.tune import eval_mask

    # the tuning-seed runs at their group's chosen values: eval_mask's own matching of (group, chosen
    # values), with the tuning seeds in the judging seeds' place
    hit = eval_mask(loaded.runs, dataclasses.replace(sel, eval_seeds=list(sel.tune_seeds)))
    signatures: dict[int, set[tuple]] = {}
    for w, chosen in zip(where, hit):
        if w is not None and chosen:
            k, i = w
            signatures.setdefault(k, set()).add(signature(plans[k], i))
    judge = set(judge_s)
    return {k: [i for i in range(len(plans[k].members))
                if member_seed(plans[k], i) in judge and signature(plans[k], i) in signatures.get(k, set())]
            for k in t.sweeps}


def signature(p: SweepPlan, i: int) -> tuple:
    """A member's swept values but its seed: the judging members of a chosen setting share them."""
    return tuple(sorted((k, v) for k, v in p.labels[i].items() if k != "seed"))


def union(choices: Sequence[Choice]) -> dict[int, list[int]]:
    """Per plan the judging members every choice reading it needs, together."""
    out: dict[int, set[int]] = {}
    for c in choices:
        for k, members in c.judging.items():
            out.setdefault(k, set()).update(members)
    return {k: sorted(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# the choice on disk


def chosen_rows(c: Choice) -> list[dict]:
    sel = c.selection
    return [{k: _plain(v) for k, v in row.items()} for row in sel.chosen.to_dict("records")]


def _plain(v: object) -> object:
    import math

    if hasattr(v, "item"):
        v = v.item()  # numpy scalars
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def write_choice(directory, choices: Sequence[Choice]) -> bool:
    """tuning.json (each choice: its rule, seeds, grid, chosen values with their scores, notes, the
    judging members) and tuning.csv (every group x grid value's score, rank and whether chosen) in a
    sweep's folder, atomically. Returns whether the chosen values differ from the file's before (a
    grid or seed range changed since the last choice); False where there was no file."""
    doc = {"choices": [{**c.tuning.record(), "tune_seeds": c.tune_seeds, "judge_seeds": c.judge_seeds,
                        "selected_on": c.selection.selected_on, "grid": c.selection.grid,
                        "chosen": chosen_rows(c), "dropped": c.selection.dropped, "notes": c.selection.notes,
                        "judging_members": sum(len(v) for v in c.judging.values())} for c in choices]}
    path = directory / CHOICE_FILE
    before = read_choice(directory)
    changed = before is not None and _essence(before) != _essence(doc)
    store.atomic_write(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")
    store.atomic_write(directory / SCORES_FILE, _scores_csv(choices))
    return changed


def _essence(doc: dict) -> list:
    return [(c.get("name"), c.get("tune_seeds"), c.get("judge_seeds"), c.get("grid"),
             [{k: v for k, v in r.items() if k not in ("tune_score", "tune_n")} for r in c.get("chosen", [])])
            for c in doc.get("choices", [])]


def read_choice(directory) -> dict | None:
    path = directory / CHOICE_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _scores_csv(choices: Sequence[Choice]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    header: list[str] = []
    rows: list[list] = []
    for c in choices:
        sel = c.selection
        cols = [*sel.group_cols, *sel.keys]
        chosen = {tuple(str(r[k]) for k in cols) for r in sel.chosen.to_dict("records")}
        for r in sel.scores.to_dict("records"):
            row = {"choice": c.tuning.name, **{k: r[k] for k in cols}, "score": _plain(r["score"]),
                   "n_ok": r["n_ok"], "n_failed": r["n_failed"], "rank": r["rank"],
                   "chosen": tuple(str(r[k]) for k in cols) in chosen}
            for k in row:
                if k not in header:
                    header.append(k)
            rows.append(row)
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if row.get(h) is None else row.get(h) for h in header])
    return buf.getvalue()


def epochs(p: SweepPlan, indices: Sequence[int]) -> int:
    """Member-epochs: the epochs the members train, summed."""
    return sum(int(p.cfgs[i].epochs) for i in indices)


# ---------------------------------------------------------------------------------------------
# successive halving in the tuning stage (runs/rungs.py trains the rungs)


def promote(plans: Sequence[SweepPlan], t: Tuning, table, eta: int, floor: float | None = None) -> set[str]:
    """The run names of a rung's table (runs/rungs.partial_table: its settings' first epochs) whose
    settings go on: per group the best ceil(n/eta) of its n settings, ranked by the choice's own
    code (fewest failed, best score, grid order), each group over the settings it has left."""
    from activation_bench.analysis.loading import load

    return promoted(load([str(table)]), t, *seeds(plans, t), eta, floor)


def promoted(loaded: Any, t: Tuning, tune_s: Sequence[str], judge_s: Sequence[str], eta: int,
             floor: float | None = None) -> set[str]:
    """promote on a rung's table already loaded (a loading.Loaded of the live settings' tuning runs,
    their first epochs), given the tuning and judging seeds: what benchmarks/halving_agreement.py
    calls on a full tuning's runs cut to a rung."""
    from activation_bench.analysis import tune
    from activation_bench.analysis.compare import resolve_groups
    from activation_bench.analysis.metrics import FLOOR, parse_metric
    from activation_bench.runs import rungs

    group_cols = [c for c in resolve_groups(loaded, list(t.by) if t.by else None) if c not in t.spec.keys]
    spec = dataclasses.replace(t.spec, grid="own")
    sel = tune.choose(loaded, parse_metric(t.metric), group_cols, spec, tune_s, judge_s,
                      FLOOR if floor is None else floor)
    scores = sel.scores
    size = scores.groupby(group_cols, sort=False, dropna=False)["rank"].transform("size") if group_cols \
        else len(scores)
    kept_n = size.apply(rungs.survivors, eta=eta) if group_cols else rungs.survivors(size, eta)
    keep = scores[scores["rank"] <= kept_n]
    kept = dataclasses.replace(sel, chosen=keep[[*group_cols, *t.spec.keys]], eval_seeds=list(tune_s))
    return set(loaded.runs["run"][tune.eval_mask(loaded.runs, kept)])


def settings(p: SweepPlan, members: Sequence[int]) -> dict[tuple, list[int]]:
    """The tuning members by setting (their swept values but the seed), in plan order."""
    out: dict[tuple, list[int]] = {}
    for i in members:
        out.setdefault(signature(p, i), []).append(i)
    return out


def _groups(p: SweepPlan, t: Tuning) -> tuple[list[int], dict[tuple, list[int]]]:
    """The tuning members, and per group (a setting's values but the tuned keys') its settings' sizes."""
    members = tuning_members([p], [t])[0]
    groups: dict[tuple, list[int]] = {}
    for sig, m in settings(p, members).items():
        groups.setdefault(tuple((k, v) for k, v in sig if k not in t.spec.keys), []).append(len(m))
    return members, groups


def _rungs(p: SweepPlan, eta: int, members: Sequence[int], groups: dict[tuple, list[int]]) -> list[int]:
    from activation_bench.runs import rungs

    epochs = {int(p.cfgs[i].epochs) for i in members}
    if len(epochs) != 1:
        raise UsageError(f"--halving: the tuning members train {', '.join(map(str, sorted(epochs)))} epochs; its rungs "
                         "are fractions of one number of epochs (sweep epochs in separate sweeps)")
    return rungs.schedule(epochs.pop(), max(len(sizes) for sizes in groups.values()), eta)


def halving_rungs(p: SweepPlan, t: Tuning, eta: int) -> list[int]:
    """The rungs' epochs (runs/rungs.schedule) for the most values any group tunes over; UsageError
    where the tuning members do not share one number of epochs."""
    return _rungs(p, eta, *_groups(p, t))


def halving_epochs(p: SweepPlan, t: Tuning, eta: int) -> tuple[int, int]:
    """The tuning stage under halving, before it runs: (members trained to the end, member-epochs),
    each group keeping ceil(n/eta) of its n settings at every rung."""
    from activation_bench.runs import rungs

    members, groups = _groups(p, t)
    epochs = _rungs(p, eta, members, groups)
    total = last = 0
    for sizes in groups.values():
        n, before, width = len(sizes), 0, max(sizes)
        for upto in epochs:
            total += n * width * (upto - before)
            before, last_n = upto, n
            n = rungs.survivors(n, eta)
        last += last_n * width
    return last, total


def subset(loaded: Any, keep: Any) -> Any:
    """The runs of a loading.Loaded where `keep` (a mask over loaded.runs) holds, as a Loaded."""
    import numpy as np

    from activation_bench.analysis.loading import Loaded

    idx = np.flatnonzero(keep)
    starts, ends = loaded.bounds[idx], loaded.bounds[idx + 1]
    rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)]) if len(idx) else np.zeros(0, np.int64)
    bounds = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)
    return Loaded(loaded.runs.iloc[idx].reset_index(drop=True), list(loaded.config_cols), loaded.epoch[rows],
                  {k: v[rows] for k, v in loaded.losses.items()}, bounds, list(loaded.warnings))
