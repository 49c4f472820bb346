"""`actbench search`: draw candidates, drop duplicates and refusals, and run the rungs as sweeps.

DIR/NAME holds search.yaml (the settings, and after the judgement the screen's agreement with it;
a rerun with the same settings resumes, different ones are refused), candidates.csv (one row per
drawn candidate: fn, same_as, status, reason, rung, score, screen_lr, lr, judged; with --select-on
val_acc the score column is mean_val_acc) and one sweep directory per rung (rung1, rung2, ...),
each a normal sweep (sweep.yaml, one run directory per member, results.csv) that compare, rank and
report read. A rung's members are expression activations (label `activation` = the expression) at
a learning rate (label `lr`) on the rung's seeds; the last rung adds the baselines under their
registry names. Every rung is a deterministic function of the settings and the finished runs of
the rungs before it, so a killed search resumes where it stopped: finished members are found by
their config hash and skipped.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from activation_bench.cfg import Cfg
from activation_bench.errors import UsageError
from activation_bench.runs import orchestrate, store
from activation_bench.search import fingerprint, halving, scores, space
from activation_bench.search.defaults import LRS, SCREEN_LRS

FIELDS = ("fn", "same_as", "status", "reason", "rung")  # then the score column (halving.SCORE_COLUMN)
LATER = ("screen_lr", "lr", "judged")  # after the score: rung 1's learning rate; the judgement's lr and score


@dataclass(frozen=True)
class Settings:
    overrides: tuple[str, ...]
    space: str
    candidates: int | None
    draw_seed: int
    seeds: int
    rungs: int
    keep: float
    final_seeds: int
    select_on: str = "val_loss"  # halving.SELECT_ON; search.yaml files without it mean val_loss
    lrs: tuple[float, ...] = LRS  # the judgement's learning-rate grid
    screen_lrs: tuple[float, ...] = SCREEN_LRS  # rung 1's learning rates
    tune_seeds: int = 4  # the judgement's tuning seeds
    judge: int = 16  # at most this many survivors are judged

    def check(self) -> None:
        if self.select_on not in halving.SELECT_ON:
            raise UsageError(f"--select-on {self.select_on}: the search selects on validation numbers only; "
                             f"valid: {', '.join(halving.SELECT_ON)}")
        if self.seeds < 1:
            raise UsageError("--seeds must be at least 1")
        if self.final_seeds < 2:
            raise UsageError("--final-seeds must be at least 2: the verdict's paired statistics need two judging seeds")
        if self.rungs < 2:
            raise UsageError("--rungs must be at least 2 (one screening rung and the fresh-seed judgement)")
        if not 0 < self.keep <= 1:
            raise UsageError(f"--keep must be in (0, 1], got {self.keep:g}")
        if self.tune_seeds < 1 or self.judge < 1:
            raise UsageError("--tune-seeds and --judge must be at least 1")
        if len(set(self.lrs)) < 2:
            raise UsageError("--lrs needs at least 2 learning rates: the judgement tunes each function over them")
        for text in self.overrides:
            key = _key(text)
            if key == "seed" or key == "activation" or key.startswith("activation."):
                raise UsageError(f"'{text}': the search sets {key} itself (--seeds, --final-seeds, the candidates)")
            if key == "lr":
                raise UsageError(f"'{text}': the search sets lr itself (--screen-lrs in the screen, --lrs in the "
                                 "judgement)")


def parse_lrs(text: str, flag: str) -> tuple[float, ...]:
    """A comma list of positive learning rates, e.g. 1e-3,1e-2."""
    import math

    out = []
    for item in (t.strip() for t in text.split(",")):
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag} {text}: expected a comma list of positive numbers, e.g. 1e-3,1e-2")
        out.append(value)
    return tuple(dict.fromkeys(out))


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


@dataclass
class Search:
    settings: Settings
    directory: Path
    epochs: int  # the first rung's
    verdicts: list[fingerprint.Verdict]
    rungs: list[halving.Rung]
    reached: dict[str, tuple[int, float]] = field(default_factory=dict)  # fn -> (rung, score)
    scores: dict[int, dict[str, tuple[float, str]]] = field(default_factory=dict)  # finished rung -> fn -> (score, lr)
    judged: dict[str, tuple[str, float]] = field(default_factory=dict)  # fn -> (chosen lr, judged score)

    @property
    def unique(self) -> list[str]:
        return [v.fn for v in self.verdicts if v.status == "unique"]


def default_name(s: Settings) -> str:
    """search_<overrides>-<digest of the settings>; the default --select-on stays out of the digest,
    so searches named before the option existed keep their names."""
    text = repr(sorted(_identity(asdict(s)).items()))
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return store.slug("search_" + "_".join(s.overrides), 60) + "-" + digest


def prepare(s: Settings, runs_dir: Path, name: str | None) -> Search:
    """Check the settings, draw and deduplicate the candidates, and check that the directory holds
    no other search; nothing is written."""
    from activation_bench.config.compose import compose

    s.check()
    sp = space.load(s.space)
    base = compose(list(s.overrides) + ["activation=relu"])  # the task and budget, checked once
    check_task(s, base)
    directory = runs_dir / (store.check_name(name) if name else default_name(s))
    store.inside(runs_dir, directory)
    existing = directory / "search.yaml"
    if existing.exists():
        from activation_bench.cfg import load_yaml

        old = load_yaml(existing.read_text(encoding="utf-8"))
        settings = old.get("settings") if isinstance(old, dict) else None
        if not isinstance(settings, dict) or _identity(settings) != _identity(_plain(s)):
            raise UsageError(f"{directory} holds a different search; choose another --name")
    fns = [sp.candidate(i) for i in space.draw(sp, s.candidates, s.draw_seed)]
    verdicts = fingerprint.dedup(fns, fingerprint.expr_probe(base.dtype))
    if not any(v.status == "unique" for v in verdicts):
        raise UsageError("every candidate was refused by the probe; nothing to train")
    rungs = halving.schedule(int(base.epochs), s.seeds, s.rungs, s.final_seeds, s.tune_seeds)
    return Search(s, directory, int(base.epochs), verdicts, rungs)


def check_task(s: Settings, base: Cfg) -> None:
    """Refuse selecting on accuracy where the composed task is not classification."""
    task = base.data.get("task") or "regression"
    if s.select_on == "val_acc" and task != "classification":
        raise UsageError(f"--select-on val_acc: data={base.data.get('name')} is a {task} task (no accuracy); "
                         "use --select-on val_loss, or a classification task (data.task=classification)")


def _identity(settings: dict) -> dict:
    """The settings as they identify a search: select_on left out at its default (val_loss), so that
    search.yaml files written before the option existed still resume."""
    return {k: v for k, v in settings.items() if not (k == "select_on" and v == "val_loss")}


def _plain(s: Settings) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items()}  # as YAML reads it back


def write_settings(search: Search) -> None:
    from activation_bench.cfg import dump_yaml

    runs_root = search.directory.parent
    store.ensure_root(runs_root)
    search.directory.mkdir(parents=True, exist_ok=True)
    store.atomic_write(search.directory / "search.yaml", dump_yaml(_search_doc(search)))
    write_candidates(search)


def _search_doc(search: Search, agreement: dict | None = None, budget: dict | None = None) -> dict:
    doc = {"settings": _plain(search.settings), "space_size": len(search.verdicts),
           "rungs": [asdict(r) | {"seeds": list(r.seeds), "tune_seeds": list(r.tune_seeds)} for r in search.rungs]}
    return doc | ({"agreement": agreement} if agreement is not None else {}) | \
        ({"budget_check": budget} if budget is not None else {})


def write_agreement(search: Search, agreement: dict, budget: dict | None = None) -> None:
    """search.yaml with the screen's agreement with the judgement (judge.agreement) and the
    verdict's budget check (budget.BudgetCheck.to_dict)."""
    from activation_bench.cfg import dump_yaml

    store.atomic_write(search.directory / "search.yaml", dump_yaml(_search_doc(search, agreement, budget)))


def rung_dir(search: Search, rung: halving.Rung) -> Path:
    return search.directory / f"rung{rung.number}"


def rung_candidates(search: Search, rung: halving.Rung) -> list[str]:
    """The candidates of a rung: every unique one in rung 1, then the best of the rung before
    (scores from its finished runs); the judgement takes at most --judge of them."""
    if rung.number == 1:
        return search.unique
    before = search.rungs[rung.number - 2]
    order = rung_candidates(search, before)
    got = rung_scores(search, before, order)
    kept = halving.select({fn: sc for fn, (sc, _) in got.items()}, order, search.settings.keep,
                          search.settings.select_on)
    return kept[: search.settings.judge] if rung.final else kept


def screen_lr(search: Search) -> dict[str, str]:
    """Each candidate's learning rate from rung 1 (the best of --screen-lrs), which the later
    screening rungs train it at."""
    first = search.rungs[0]
    return {fn: lr for fn, (_, lr) in rung_scores(search, first, rung_candidates(search, first)).items()}


def tried(search: Search, rung: halving.Rung, fns: Sequence[str]) -> dict[str, list[str]]:
    """The learning rates a screening rung trains each candidate at: --screen-lrs in rung 1, then
    the one rung 1 chose."""
    if rung.number == 1:
        return {fn: [scores.lr_label(x) for x in search.settings.screen_lrs] for fn in fns}
    chosen = screen_lr(search)
    return {fn: [chosen[fn]] for fn in fns}


def quoted(fn: str) -> str:
    """An expression as a quoted Hydra value (the grammar allows no quotes or backslashes in it)."""
    return '"' + fn + '"'


def base_overrides(search: Search, rung: halving.Rung) -> list[str]:
    """The task's overrides with the rung's epochs."""
    return [o for o in search.settings.overrides if _key(o) != "epochs"] + [f"epochs={rung.epochs}"]


def activation_overrides(fn: str) -> list[str]:
    """A candidate (an expression) or a baseline (a registry name) as overrides."""
    return [f"activation={fn}"] if fn in halving.BASELINES else ["activation=expr", f"activation.fn={quoted(fn)}"]


def sweep_plan(search: Search, rung: halving.Rung, overrides: list[str],
               members: Sequence[tuple[str, str, int]]) -> orchestrate.SweepPlan:
    """A rung's sweep plan from its (fn, lr, seed) members, labelled activation, lr, seed."""
    from activation_bench.config.hashing import config_hash

    base = base_overrides(search, rung)
    args = [base + activation_overrides(fn) + [f"lr={lr}", f"seed={seed}"] for fn, lr, seed in members]
    labels = [{"activation": fn, "lr": lr, "seed": str(seed)} for fn, lr, seed in members]
    cfgs = orchestrate.compose_members(args, labels)
    names = [orchestrate.member_name(i, lab) for i, lab in enumerate(labels)]
    return orchestrate.SweepPlan(rung_dir(search, rung), overrides, ["activation", "lr", "seed"], args, labels,
                                 names, cfgs, [config_hash(c) for c in cfgs])


def plan_rung(search: Search, rung: halving.Rung) -> orchestrate.SweepPlan:
    """A screening rung as a sweep plan: candidates x their learning rates x seeds. (The final rung
    is planned by search.judge.)"""
    fns = rung_candidates(search, rung)
    lrs = tried(search, rung, fns)
    members = [(fn, lr, seed) for fn in fns for lr in lrs[fn] for seed in rung.seeds]
    every = sorted({lr for v in lrs.values() for lr in v}, key=float)
    overrides = base_overrides(search, rung) + [
        "activation=expr", "activation.fn=" + ",".join(quoted(f) for f in fns),
        "lr=" + ",".join(every), "seed=" + ",".join(map(str, rung.seeds))]
    return sweep_plan(search, rung, overrides, members)


def rung_scores(search: Search, rung: halving.Rung, fns: Sequence[str]) -> dict[str, tuple[float, str]]:
    """Each candidate's (score, learning rate) in a screening rung, from the run directories written
    so far (a candidate missing a seed scores `halving.worst` at that learning rate)."""
    if rung.number in search.scores:
        return {fn: search.scores[rung.number][fn] for fn in fns}
    table = scores.run_table(rung_dir(search, rung), search.settings.select_on)
    return scores.candidate_scores(table, tried(search, rung, fns), rung.seeds, search.settings.select_on)


def record(search: Search, rung: halving.Rung) -> dict[str, tuple[float, str]]:
    """After a screening rung: its candidates' scores, kept in candidates.csv (rung reached, score,
    rung 1's learning rate)."""
    fns = rung_candidates(search, rung)
    got = rung_scores(search, rung, fns)
    search.scores[rung.number] = got
    for fn in fns:
        search.reached[fn] = (rung.number, got[fn][0])
    write_candidates(search)
    return got


def write_candidates(search: Search) -> Path:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*FIELDS, halving.SCORE_COLUMN[search.settings.select_on], *LATER])
    first = search.scores.get(1, {})
    for v in search.verdicts:
        rung, sc = search.reached.get(v.fn, ("", ""))
        status = {"unique": "trained", "duplicate": "duplicate", "rejected": "rejected"}[v.status]
        if v.status == "unique" and not rung:
            status = "pending"
        lr, judged = search.judged.get(v.fn, ("", ""))
        writer.writerow([v.fn, v.same_as, status, v.reason, rung, "" if sc == "" else repr(sc),
                         first.get(v.fn, ("", ""))[1], lr, "" if judged == "" else repr(judged)])
    path = search.directory / "candidates.csv"
    store.atomic_write(path, buf.getvalue())
    return path
