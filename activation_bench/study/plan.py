"""A study's plan: every sweep expanded and composed (the sweep command's own `orchestrate.plan`),
what is left to train, and the checks that need composed configs: the columns a comparison, ranking
or figure reads are logged by its sweeps, and its tuned keys are swept there. Nothing is written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from activation_bench.errors import UsageError
from activation_bench.study.spec import Fail, RankingSpec, Study, TuneFields

if TYPE_CHECKING:
    from activation_bench.analysis.staged import Tuning
    from activation_bench.runs.orchestrate import SweepPlan


@dataclass
class PlannedSweep:
    name: str
    plan: SweepPlan
    todo: list[int]  # members not finished yet
    columns: set[str]  # the per-epoch columns its members log

    @property
    def command(self) -> list[str]:
        """The equivalent `actbench sweep` command line (resuming it trains the same members)."""
        return ["actbench", "sweep", "--runs-dir", str(self.plan.directory.parent), "--name",
                self.plan.directory.name, *self.plan.overrides]


def plan(study: Study, force: bool = False) -> list[PlannedSweep]:
    """Every sweep planned (exit-2 errors name the sweep), then the cross-checks."""
    from activation_bench.engine.plan import logged_columns
    from activation_bench.runs import orchestrate

    out = []
    for name, sw in study.spec.sweeps.items():
        overrides = [*sw.grid, *sw.overrides]
        try:
            p = orchestrate.plan(overrides, study.runs_dir, sw.dir or name, tuned=sw.staged)
        except UsageError as exc:
            raise UsageError(f"{study.path}: sweeps.{name}: {exc}") from None
        columns: set[str] = set()
        seen: set[tuple] = set()
        for cfg in p.cfgs:  # columns depend on the data and log settings: one look per distinct pair
            key = (repr(cfg.data.plain() if hasattr(cfg.data, "plain") else cfg.data), bool(cfg.log.get("train_eval")))
            if key not in seen:
                seen.add(key)
                columns |= logged_columns(cfg)
        out.append(PlannedSweep(name, p, orchestrate.pending(p, force), columns))
    _cross_check(study, {s.name: s for s in out})
    _check_tunings(study, out)
    return out


def tunings(study: Study, sweeps: list[PlannedSweep]) -> list[Tuning]:
    """The rules that choose a tuned sweep's judging members: a sweep's own (tune on the sweep), else
    each comparison's and ranking's that tunes it (judge: chosen; a rule reads all of its part's
    sweeps, tuned or not)."""
    from activation_bench.analysis.staged import Tuning
    from activation_bench.analysis.tune import TuneSpec

    spec = study.spec
    names = [s.name for s in sweeps]

    def rule(part: TuneFields) -> TuneSpec:
        return TuneSpec(tuple(part.tune or ()), part.tune_seeds, part.tune_on or "val_loss", part.tune_grid or "shared")

    out = [Tuning(rule(sw), sw.metric or "final", None, (names.index(n),), f"sweeps.{n}", sw.halving)
           for n, sw in spec.sweeps.items() if sw.tune]
    derived = {names.index(n) for n, sw in spec.sweeps.items() if sw.staged and not sw.tune}
    for group in ("comparisons", "rankings"):
        for name, part in getattr(spec, group).items():
            reads = tuple(names.index(s) for s in part.sweeps)
            if not part.tune or not derived & set(reads):
                continue
            if isinstance(part, RankingSpec):
                by = (*part.task, part.by) if part.task else None
            else:
                by = tuple(part.by) if part.by else None
            out.append(Tuning(rule(part), part.metric, by, reads, f"{group}.{name}"))
    return out


def staged_sweeps(study: Study, sweeps: list[PlannedSweep]) -> set[int]:
    """The indices of the tuned sweeps (their judging seeds train at the chosen values only)."""
    return {i for i, s in enumerate(sweeps) if study.spec.sweeps[s.name].staged}


def _check_tunings(study: Study, sweeps: list[PlannedSweep]) -> None:
    """Each tuning rule against the planned grids: its keys varied, judging seeds left (one line)."""
    from activation_bench.analysis import staged

    plans = [s.plan for s in sweeps]
    for t in tunings(study, sweeps):
        try:
            staged.check(plans, t, flag="tune:")
            if t.halving:
                staged.halving_rungs(plans[t.sweeps[0]], t, t.halving)
            sw = study.spec.sweeps[sweeps[t.sweeps[0]].name]
            if sw.look_every is not None and (t.name.startswith("sweeps.") or not sw.tune):
                judge_s = staged.seeds(plans, t)[1]  # sequential judging: each rule's judging seeds
                if sw.look_every > len(judge_s):
                    raise UsageError(f"look_every {sw.look_every}: larger than the {len(judge_s)} judging seeds of "
                                     "the seed range")
                if (sw.judge_seeds_max or 0) > len(judge_s):
                    raise UsageError(f"judge_seeds_max {sw.judge_seeds_max}: the seed range has {len(judge_s)} "
                                     "judging seeds")
        except UsageError as exc:
            raise UsageError(f"{study.path}: {t.name}: {exc}") from None


# keys whose values name code to import: model=module's target and replaced types, a user's activation
CODE_KEYS = ("model.target", "model.replace", "activation._target_")


def imports(study: Study) -> list[tuple[str, str]]:
    """Every module a study file's sweeps name for importing (their code runs when the sweeps are
    planned and trained), as (module, key), from the file's own text: listed before planning runs
    anything. A bare model.replace name is torch.nn's."""
    from activation_bench.config.grid import parse_overrides

    found: dict[tuple[str, str], None] = {}
    for sw in study.spec.sweeps.values():
        try:
            parsed = parse_overrides([*sw.grid, *sw.overrides])
        except UsageError:
            continue  # planning refuses it, naming the sweep
        for ov in parsed:
            if ov.key_or_group not in CODE_KEYS:
                continue
            values = list(ov.sweep_iterator()) if ov.is_sweep_override() else ov.value()
            for v in values if isinstance(values, list) else [values]:
                text = str(v)
                module = (text.partition(":")[0] if ":" in text else text.rpartition(".")[0]) or "torch.nn"
                found[(module, ov.key_or_group)] = None
    return list(found)


def _cross_check(study: Study, sweeps: dict[str, PlannedSweep]) -> None:
    spec = study.spec

    def fail(key: str, msg: str) -> NoReturn:
        raise UsageError(f"{study.path}: {key}: {msg}")

    for group in ("comparisons", "rankings"):
        for name, part in getattr(spec, group).items():
            key = f"{group}.{name}"
            parts = [sweeps[s] for s in part.sweeps]
            if part.loss is not None:
                _logged(fail, f"{key}.loss", part.loss, parts)
            if part.tune_on is not None:
                _logged(fail, f"{key}.tune_on", part.tune_on, parts)
            if part.tune and not part.tune_on:
                _logged(fail, f"{key}.tune", "val_loss", parts, why=" (tuning selects on val_loss)")
            _swept(fail, key, part, parts)
            if isinstance(part, RankingSpec):
                _tasks(fail, key, part, parts)
    for name, sw in spec.sweeps.items():
        if sw.loss is not None:
            _logged(fail, f"sweeps.{name}.loss", sw.loss, [sweeps[name]])
    for name, fig in spec.figures.items():
        parts = [sweeps[s] for s in fig.sweeps]
        if fig.loss is not None:
            _logged(fail, f"figures.{name}.loss", fig.loss, parts)
        if fig.x is not None and not any(fig.x in s.plan.keys for s in parts):
            fail(f"figures.{name}.x", f"'{fig.x}' is not swept in {', '.join(fig.sweeps)} "
                 f"(swept: {_keys(parts)})")


def _logged(fail: Fail, key: str, column: str, parts: list[PlannedSweep], why: str = "") -> None:
    missing = [s.name for s in parts if column not in s.columns]
    if missing:
        have = ", ".join(sorted(set.union(*(s.columns for s in parts))))
        fail(key, f"no run of sweep {', '.join(missing)} logs {column}{why} (logged: {have})")


def _swept(fail: Fail, key: str, part: TuneFields, parts: list[PlannedSweep]) -> None:
    """Each tuned key takes several values: swept in one of the sweeps, or set to a different single
    value in each (as compare reads it from each sweep.yaml: loading.fixed_values)."""
    from activation_bench.analysis.loading import fixed_values

    for k in part.tune or []:
        if any(k in s.plan.keys for s in parts):
            continue
        if len({fixed_values(s.plan.overrides).get(k) for s in parts} - {None}) < 2:
            fail(f"{key}.tune", f"'{k}' is not swept in {', '.join(s.name for s in parts)} "
                 f"(swept: {_keys(parts)}) and has one value in all of them: tuning chooses among a grid")


def _tasks(fail: Fail, key: str, part: RankingSpec, parts: list[PlannedSweep]) -> None:
    """A ranking needs tasks: given task columns swept, or something besides the ranked key, the seed
    and the tuned keys varying within or between its sweeps."""
    by, tuned = part.by, set(part.tune or [])
    swept = {k for s in parts for k in s.plan.keys}
    for t in part.task or []:
        if t not in swept and len(parts) < 2:
            fail(f"{key}.task", f"'{t}' is not swept in {parts[0].name} (swept: {_keys(parts)})")
    if not part.task and len(parts) < 2 and not swept - {by, "seed", *tuned}:
        fail(key, f"only one task: nothing but {', '.join(sorted(swept))} varies in {parts[0].name}; "
             "a ranking ranks across tasks (`comparisons` compare on one)")


def _keys(parts: list[PlannedSweep]) -> str:
    return ", ".join(dict.fromkeys(k for s in parts for k in s.plan.keys)) or "nothing"
