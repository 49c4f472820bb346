"""`actbench search`: draw candidates, drop duplicates and refusals, and run the rungs as sweeps.

DIR/NAME holds search.yaml (the settings; a rerun with the same ones resumes, different ones are
refused), candidates.csv (one row per drawn candidate: fn, same_as, status, reason, rung, score;
with --select-on val_acc the score column is mean_val_acc)
and one sweep directory per rung (rung1, rung2, ...), each a normal sweep (sweep.yaml, one run
directory per member, results.csv) that compare, rank and report read. A rung's members are
expression activations (label `activation` = the expression) on the rung's seeds; the last rung
adds the baselines under their registry names. Every rung is a deterministic function of the
settings and the finished runs of the rungs before it, so a killed search resumes where it
stopped: finished members are found by their config hash and skipped.
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
from activation_bench.search import fingerprint, halving, space

FIELDS = ("fn", "same_as", "status", "reason", "rung")  # then the score column (halving.SCORE_COLUMN)


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

    def check(self) -> None:
        if self.select_on not in halving.SELECT_ON:
            raise UsageError(f"--select-on {self.select_on}: the search selects on validation numbers only; "
                             f"valid: {', '.join(halving.SELECT_ON)}")
        if self.seeds < 1 or self.final_seeds < 1:
            raise UsageError("--seeds and --final-seeds must be at least 1")
        if self.rungs < 2:
            raise UsageError("--rungs must be at least 2 (one screening rung and the fresh-seed judgement)")
        if not 0 < self.keep <= 1:
            raise UsageError(f"--keep must be in (0, 1], got {self.keep:g}")
        for text in self.overrides:
            key = _key(text)
            if key == "seed" or key == "activation" or key.startswith("activation."):
                raise UsageError(f"'{text}': the search sets {key} itself (--seeds, --final-seeds, the candidates)")


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
        import yaml

        old = yaml.safe_load(existing.read_text(encoding="utf-8"))
        settings = old.get("settings") if isinstance(old, dict) else None
        if not isinstance(settings, dict) or _identity(settings) != _identity(_plain(s)):
            raise UsageError(f"{directory} holds a different search; choose another --name")
    fns = [sp.candidate(i) for i in space.draw(sp, s.candidates, s.draw_seed)]
    verdicts = fingerprint.dedup(fns, fingerprint.expr_probe(base.dtype))
    if not any(v.status == "unique" for v in verdicts):
        raise UsageError("every candidate was refused by the probe; nothing to train")
    rungs = halving.schedule(int(base.epochs), s.seeds, s.rungs, s.final_seeds)
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
    d = asdict(s)
    d["overrides"] = list(s.overrides)
    return d


def write_settings(search: Search) -> None:
    from activation_bench.cfg import dump_yaml

    runs_root = search.directory.parent
    store.ensure_root(runs_root)
    search.directory.mkdir(parents=True, exist_ok=True)
    doc = {"settings": _plain(search.settings), "space_size": len(search.verdicts),
           "rungs": [asdict(r) | {"seeds": list(r.seeds)} for r in search.rungs]}
    store.atomic_write(search.directory / "search.yaml", dump_yaml(doc))
    write_candidates(search)


def rung_dir(search: Search, rung: halving.Rung) -> Path:
    return search.directory / f"rung{rung.number}"


def rung_candidates(search: Search, rung: halving.Rung) -> list[str]:
    """The candidates of a rung: every unique one in rung 1, then the best of the rung before
    (scores from its finished runs)."""
    if rung.number == 1:
        return search.unique
    before = search.rungs[rung.number - 2]
    order = rung_candidates(search, before)
    scores = rung_scores(search, before, order)
    return halving.select(scores, order, search.settings.keep, search.settings.select_on)


def quoted(fn: str) -> str:
    """An expression as a quoted Hydra value (the grammar allows no quotes or backslashes in it)."""
    return '"' + fn + '"'


def plan_rung(search: Search, rung: halving.Rung) -> orchestrate.SweepPlan:
    """The rung as a sweep plan: candidates x seeds (plus the baselines in the final rung)."""
    from activation_bench.config.hashing import config_hash

    fns = rung_candidates(search, rung)
    base = [o for o in search.settings.overrides if _key(o) != "epochs"] + [f"epochs={rung.epochs}"]
    members, labels = [], []
    for fn in fns:
        for seed in rung.seeds:
            members.append(base + ["activation=expr", f"activation.fn={quoted(fn)}", f"seed={seed}"])
            labels.append({"activation": fn, "seed": str(seed)})
    if rung.final:
        for name in halving.BASELINES:
            for seed in rung.seeds:
                members.append(base + [f"activation={name}", f"seed={seed}"])
                labels.append({"activation": name, "seed": str(seed)})
    cfgs = orchestrate.compose_members(members, labels)
    seeds = ",".join(map(str, rung.seeds))
    overrides = base + ["activation=expr", "activation.fn=" + ",".join(quoted(f) for f in fns), f"seed={seeds}"]
    if rung.final:
        overrides.append("+baselines=" + ",".join(halving.BASELINES))  # trained beside them: not a grid key
    names = [orchestrate.member_name(i, lab) for i, lab in enumerate(labels)]
    return orchestrate.SweepPlan(rung_dir(search, rung), overrides, ["activation", "seed"], members, labels,
                                 names, cfgs, [config_hash(c) for c in cfgs])


def rung_scores(search: Search, rung: halving.Rung, fns: Sequence[str]) -> dict[str, float]:
    """Each candidate's score in a rung, from the run directories written so far (a candidate missing
    a seed scores `halving.worst`)."""
    on = search.settings.select_on
    per: dict[str, list[float]] = {fn: [] for fn in fns}
    seen: dict[str, set[str]] = {fn: set() for fn in fns}
    for _, summary in orchestrate.done_hashes(rung_dir(search, rung)).values():
        lab = summary.get("labels") or {}
        fn = lab.get("activation")
        if fn in per and lab.get("seed") not in seen[fn]:
            seen[fn].add(lab.get("seed"))
            per[fn].append(halving.member_score(summary, on))
    n = len(rung.seeds)
    return {fn: halving.score(v, on) if len(v) == n else halving.worst(on) for fn, v in per.items()}


def record(search: Search, rung: halving.Rung) -> dict[str, float]:
    """After a rung: its candidates' scores, kept in candidates.csv (rung reached and score)."""
    fns = rung_candidates(search, rung)
    scores = rung_scores(search, rung, fns)
    for fn in fns:
        search.reached[fn] = (rung.number, scores[fn])
    write_candidates(search)
    return scores


def baseline_scores(search: Search) -> dict[str, float]:
    final = search.rungs[-1]
    return rung_scores(search, final, list(halving.BASELINES))


def write_candidates(search: Search) -> Path:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*FIELDS, halving.SCORE_COLUMN[search.settings.select_on]])
    for v in search.verdicts:
        rung, sc = search.reached.get(v.fn, ("", ""))
        status = {"unique": "trained", "duplicate": "duplicate", "rejected": "rejected"}[v.status]
        if v.status == "unique" and not rung:
            status = "pending"
        writer.writerow([v.fn, v.same_as, status, v.reason, rung, "" if sc == "" else repr(sc)])
    path = search.directory / "candidates.csv"
    store.atomic_write(path, buf.getvalue())
    return path
