"""`actbench rank`: which group (activation) is best across many tasks (Demšar 2006).

Within every task (a combination of the other varying config values, seeds averaged) the groups are
ranked by their mean score over seeds (losses: mean log10 loss, floored as in `compare`, lowest first;
accuracies: mean accuracy, highest first; ties get average ranks); ranks are averaged over tasks.
Friedman's test is scipy's; Nemenyi's post-hoc p-values and critical difference come from scipy's
studentized range (equal to scikit-posthocs' posthoc_nemenyi_friedman, checked in tests); Wilcoxon
signed-rank tests over tasks are scipy's, Holm-corrected against the best, or over all pairs through
scikit-posthocs' posthoc_wilcoxon.

`rank(loaded, ...)` builds the task x group score matrix from loaded runs; `rank_matrix(scores)`
does the statistics on any such matrix. No torch, no rich, no matplotlib here (see rank_render.py).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from activation_bench.analysis.budget import STATS, BudgetCheck, budget_check, read_runs, validation_column
from activation_bench.analysis.loading import Loaded, higher_is_better, varying_columns
from activation_bench.analysis.metrics import ACCURACY, FLOOR, LOG10, Metric, parse_metric, run_values, scale
from activation_bench.analysis.selection import Selection
from activation_bench.analysis.stats import ALPHA, holm
from activation_bench.analysis.tasks import check_tasks
from activation_bench.analysis.tune import TuneSpec, parse_tune, tuned_values
from activation_bench.analysis.verdicts import Margin, check_margin
from activation_bench.errors import UsageError

POSTHOCS = ("nemenyi", "wilcoxon")
RANK_COLS = ["mean_rank", "n_tasks", "wins", "ties", "losses", "p_nemenyi", "p_wilcoxon_holm", "group"]


@dataclass
class RankResult:
    """`table`: one row per group, best (lowest mean rank) first, columns `by` + RANK_COLS;
    `scores`/`ranks`: task x group matrices (index: task label); p matrices group x group."""

    table: pd.DataFrame
    by: str
    task_cols: list[str]
    scores: pd.DataFrame
    ranks: pd.DataFrame
    friedman_stat: float
    friedman_p: float
    critical_difference: float
    p_nemenyi: pd.DataFrame
    p_wilcoxon: pd.DataFrame | None  # all pairs, Holm; computed with posthoc="wilcoxon" only
    groups: list[list[str]]
    alpha: float = ALPHA
    posthoc: str = "nemenyi"
    metric: Metric = field(default_factory=lambda: Metric("final"))
    loss: str = "train_loss"
    warnings: list[str] = field(default_factory=list)
    tuning: Selection | None = None  # with --tune: what was chosen per task and group
    budget: BudgetCheck | None = None  # per ranked value: runs still improving when the budget ran out
    margin: Margin | None = None  # with --margin: `within_margin`, the tasks practically tied with the best

    @property
    def all_warnings(self) -> list[str]:
        """`warnings` and, where it fires, the budget check's warning."""
        extra = self.budget.warning if self.budget is not None else None
        return [*self.warnings, extra] if extra else list(self.warnings)

    @property
    def best(self) -> str:
        return str(self.table[self.by].iloc[0])

    @property
    def higher_is_better(self) -> bool:
        """Whether a higher score is better: an accuracy metric (`scores` holds mean accuracies)."""
        return scale(self.metric, self.loss) == ACCURACY

    @property
    def p_posthoc(self) -> pd.DataFrame:
        """The p-value matrix that decides the groups and the diagram's bars."""
        return self.p_wilcoxon if self.posthoc == "wilcoxon" and self.p_wilcoxon is not None else self.p_nemenyi

    @property
    def methods(self) -> list[str]:
        return method_notes(self)


def parse_alpha(text: str | float, option: str = "--alpha") -> float:
    """A significance level strictly between 0 and 1."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not (0 < value < 1):
        raise UsageError(f"{option} {text}: needs a number between 0 and 1, e.g. 0.05")
    return value


# ---------------------------------------------------------------------------------------------
# statistics on a task x group matrix


def rank_matrix(scores: pd.DataFrame, alpha: float = ALPHA, posthoc: str = "nemenyi",
                lower_is_better: bool = True) -> dict:
    """Ranks, Friedman test, Nemenyi and Holm-corrected Wilcoxon p matrices, critical difference and
    groups for a complete task x group matrix of scores (rows: tasks, columns: groups)."""
    if posthoc not in POSTHOCS:
        raise UsageError(f"unknown post-hoc test '{posthoc}'; valid: {', '.join(POSTHOCS)}")
    n, k = scores.shape
    if k < 2:
        raise UsageError(f"ranking needs at least 2 groups, got {k}")
    if n < 2:
        raise UsageError(f"ranking needs at least 2 tasks, got {n}")
    values = scores.to_numpy(float) if lower_is_better else -scores.to_numpy(float)
    ranks = pd.DataFrame(stats.rankdata(values, axis=1, method="average"), index=scores.index,
                         columns=scores.columns)
    stat, p = float("nan"), float("nan")
    if k >= 3 and not np.all(values == values[:, :1]):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            res = stats.friedmanchisquare(*values.T)
        stat, p = float(res.statistic), float(res.pvalue)
    mean_rank = ranks.mean(axis=0)
    order = list(mean_rank.sort_values(kind="stable").index)
    p_nem = nemenyi(ranks)
    frame = pd.DataFrame(values, index=scores.index, columns=scores.columns)
    p_wil = wilcoxon_holm(frame) if posthoc == "wilcoxon" else None
    cd = critical_difference(k, n, alpha)
    groups = contiguous_groups(order, p_nem if p_wil is None else p_wil, alpha)
    return dict(ranks=ranks, mean_rank=mean_rank, order=order, friedman_stat=stat, friedman_p=p,
                p_nemenyi=p_nem, p_wilcoxon=p_wil, p_vs_best=wilcoxon_vs(frame, order[0]),
                critical_difference=cd, groups=groups)


def nemenyi(ranks: pd.DataFrame) -> pd.DataFrame:
    """Nemenyi's all-pairs p-values from the ranks (tasks x groups): the difference of mean ranks over
    sqrt(k(k+1)/(6N)), times sqrt(2), against scipy's studentized range with k groups, as
    scikit-posthocs' posthoc_nemenyi_friedman computes them (equal in tests). Computed here in one
    vectorised call because importing scikit-posthocs costs about a second (it loads pyplot)."""
    n, k = ranks.shape
    r = ranks.mean(axis=0).to_numpy(float)
    q = np.abs(r[:, None] - r[None, :]) / math.sqrt(k * (k + 1) / (6.0 * n))
    p = stats.studentized_range.sf(q * math.sqrt(2), k, np.inf)
    np.fill_diagonal(p, 1.0)
    return pd.DataFrame(p, index=ranks.columns, columns=ranks.columns)


def _wilcoxon(a: np.ndarray, b: np.ndarray) -> float:
    """scipy's Wilcoxon signed-rank p (Pratt's zero handling); 1 when every pair ties."""
    if np.all(a == b):
        return 1.0
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return float(stats.wilcoxon(a, b, zero_method="pratt").pvalue)


def wilcoxon_vs(values: pd.DataFrame, best: str) -> pd.Series:
    """Each group against `best`: Wilcoxon signed-rank over tasks, Holm-corrected over the k - 1
    comparisons (Demšar's comparisons with a control). NaN for the best itself."""
    others = [g for g in values.columns if g != best]
    raw = [_wilcoxon(values[g].to_numpy(float), values[best].to_numpy(float)) for g in others]
    return pd.Series(holm(raw), index=others).reindex(values.columns)


def wilcoxon_holm(values: pd.DataFrame) -> pd.DataFrame:
    """All pairs: Wilcoxon signed-rank over tasks (Pratt's zero handling), Holm-corrected over all
    pairs, via scikit-posthocs' posthoc_wilcoxon."""
    import scikit_posthocs as sp

    long = pd.DataFrame({"value": values.to_numpy(float).T.ravel(),
                         "group": np.repeat(np.arange(values.shape[1]), values.shape[0])})
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        p = sp.posthoc_wilcoxon(long, val_col="value", group_col="group", zero_method="pratt", p_adjust="holm")
    return pd.DataFrame(p.to_numpy(float), index=values.columns, columns=values.columns).fillna(1.0)


def critical_difference(k: int, n: int, alpha: float = ALPHA) -> float:
    """Nemenyi's CD = q_alpha * sqrt(k(k+1) / (6N)), q_alpha the studentized range quantile / sqrt(2)."""
    q = float(stats.studentized_range.ppf(1 - alpha, k, np.inf)) / math.sqrt(2)
    return q * math.sqrt(k * (k + 1) / (6.0 * n))


def contiguous_groups(order: Sequence[str], p: pd.DataFrame, alpha: float) -> list[list[str]]:
    """Maximal runs of groups, consecutive in rank order, in which no pair differs (p >= alpha), as
    drawn by the bars of a critical-difference diagram. Groups of one are included."""
    same = p.loc[list(order), list(order)].to_numpy(float) >= alpha
    spans: list[tuple[int, int]] = []
    for i in range(len(order)):
        j = i
        while j + 1 < len(order) and same[i:j + 1, j + 1].all():
            j += 1
        if not spans or j > spans[-1][1]:
            spans.append((i, j))
    return [list(order[i:j + 1]) for i, j in spans]


# ---------------------------------------------------------------------------------------------
# from loaded runs


def resolve_task(loaded: Loaded, by: str, task: Sequence[str] | None, tuned: Sequence[str] = ()) -> list[str]:
    """--task columns (checked), else every varying config column except `by`, seed and tuned keys."""
    columns = ", ".join(loaded.config_cols) or "none"
    if by not in loaded.config_cols:
        raise UsageError(f"--by {by}: no such config column (columns: {columns})")
    if not task:
        return [c for c in varying_columns(loaded) if c not in (by, "seed", *tuned)]
    cols = list(dict.fromkeys(c.strip() for item in task for c in str(item).split(",") if c.strip()))
    both = [c for c in cols if c in tuned]
    if both:
        raise UsageError(f"--tune {both[0]} and --task {both[0]}: a key is either tuned or part of the task, not both")
    unknown = [c for c in cols if c not in loaded.config_cols]
    if unknown:
        raise UsageError(f"--task {','.join(unknown)}: no such config column (columns: {columns})")
    if by in cols:
        raise UsageError(f"--task {by}: that is the compared column (--by); a task is what the groups are ranked on")
    return cols


def task_scores(values: pd.DataFrame, loaded: Loaded, metric: Metric, column: str = "train_loss") -> np.ndarray:
    """One score per run: log10 loss (floored) for loss metrics (lower is better), the accuracy for
    accuracy metrics (higher is better), else the value; for to=EPS (lower is better) a run that
    never got there counts as its last epoch + 1. NaN for unusable runs."""
    how = scale(metric, column)
    if how == LOG10:
        return values["log10"].to_numpy(float)
    if how == ACCURACY:
        return values["value"].to_numpy(float)
    score = values["value"].to_numpy(float).copy()
    not_reached = (values["status"] == "not_reached").to_numpy()
    last_epoch = loaded.epoch[np.maximum(loaded.bounds[1:] - 1, 0)].astype(float) if len(loaded.epoch) else score
    score[not_reached] = last_epoch[not_reached] + 1
    return score


def _label(cols: Sequence[str], key: tuple) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(cols, key)) or "all runs"


def score_matrix(loaded: Loaded, metric: Metric, by: str, task_cols: Sequence[str], loss: str,
                 floor: float, notes: list[str], tune: TuneSpec | None = None,
                 used: list[np.ndarray] | None = None) -> tuple[pd.DataFrame, Selection | None]:
    """Task x group matrix of mean scores over each cell's usable runs; tasks missing a group are
    named in `notes` and left out; groups with fewer usable seeds than others in a task are named.
    With `tune`: each task x group at its tuned values, scored on the evaluation seeds only.
    `used` (a list) gets the positions of the runs the matrix rests on (the ranked tasks' runs)."""
    values = run_values(loaded, metric, loss, floor)
    frame = pd.DataFrame({c: values[c].astype(object).where(values[c].notna(), "(none)") for c in [*task_cols, by]})
    frame["score"] = task_scores(values, loaded, metric, loss)
    frame["status"] = values["status"].to_numpy(object)
    sel = None
    if tune is not None:
        kept, sel = tuned_values(loaded, values, metric, [*task_cols, by], tune, floor, notes)
        frame = frame.loc[kept.index]
    groups = list(dict.fromkeys(frame[by]))
    if len(groups) < 2:
        raise UsageError(f"--by {by}: fewer than 2 groups (only {by}={groups[0] if groups else 'nothing'})")
    usable = frame[np.isfinite(frame["score"].to_numpy(float))]
    grouped = usable.groupby([*task_cols, by], sort=False)["score"]
    mean, count = grouped.mean(), grouped.count()
    total = frame.groupby([*task_cols, by], sort=False)["score"].size()
    task_keys = list(dict.fromkeys(frame[list(task_cols)].itertuples(index=False, name=None)))
    if len(task_keys) < 2:
        raise UsageError(f"only one task ({_label(task_cols, task_keys[0]) if task_cols else 'nothing else varies'}):"
                         f" ranking needs several; `actbench compare` compares {by} groups on one task")
    rows, kept, kept_keys = [], [], []
    for key in task_keys:
        label = _label(task_cols, key)
        n = {g: int(count.get((*key, g), 0)) for g in groups}
        absent = [g for g in groups if n[g] == 0]
        if absent:
            why = ", ".join(f"{g} ({'no runs' if not total.get((*key, g), 0) else 'no usable runs'})" for g in absent)
            notes.append(f"task {label} left out of the ranking: no result for {by} {why}")
            continue
        most = max(n.values())
        short = [f"{g} ({n[g]} of {most})" for g in groups if n[g] < most]
        if short:
            notes.append(f"task {label}: fewer usable seeds for {by} {', '.join(short)}; their mean is over fewer")
        rows.append([float(mean[(*key, g)]) for g in groups])
        kept.append(label)
        kept_keys.append(key)
    if len(kept) < 2:
        raise UsageError(f"only {len(kept)} of {len(task_keys)} tasks have a result for every {by}: "
                         "ranking needs at least 2 (see the warnings above)")
    if used is not None:
        ranked = set(kept_keys)
        in_task = [tuple(k) in ranked for k in frame[list(task_cols)].itertuples(index=False, name=None)]
        used.append(loaded.runs.index.get_indexer(frame.index[np.asarray(in_task, bool)]))
    return pd.DataFrame(rows, index=pd.Index(kept, name="task"), columns=pd.Index(groups, name=by)), sel


def rank(loaded: Loaded, metric: Metric | str = "final", by: str = "activation",
         task: Sequence[str] | None = None, loss: str = "train_loss", alpha: float = ALPHA,
         posthoc: str = "nemenyi", floor: float = FLOOR, tune: TuneSpec | None = None,
         margin: Margin | None = None) -> RankResult:
    """Rank the `by` groups within each task and test the ranking (see the module docstring).
    `tune`: tune per task and group first (tune.py), then rank on the evaluation seeds. `margin`
    (verdicts.Margin): the table gains `within_margin`, per group the tasks where its mean lies within
    the margin of the best's (practically tied with it)."""
    metric = parse_metric(metric) if isinstance(metric, str) else metric
    check_margin(margin, scale(metric, loss), metric.label)
    if posthoc not in POSTHOCS:
        raise UsageError(f"unknown post-hoc test '{posthoc}'; valid: {', '.join(POSTHOCS)}")
    if tune is not None:
        parse_tune(tune.keys, tune.tune_seeds, [by])
    notes = list(loaded.warnings)
    task_cols = resolve_task(loaded, by, task, tune.keys if tune is not None else ())
    check_tasks(loaded, loss, task_cols, option="--task")
    used: list[np.ndarray] = []
    scores, sel = score_matrix(loaded, metric, by, task_cols, loss, floor, notes, tune, used)
    higher = scale(metric, loss) == ACCURACY
    st = rank_matrix(scores, alpha, posthoc, lower_is_better=not higher)
    table = _table(scores, st, by, higher)
    if margin is not None:
        table["within_margin"] = within_margin(scores, table[by].iloc[0], margin, higher)[table[by]].to_numpy(int)
    check = budget_check(loaded, [by], used[0], None, validation_column(tune), loss, order=table, verdict="ranking")
    if sel is not None:  # per ranked value its judged runs, and every run of the ranked tasks it reads
        every = budget_check(loaded, [by], read_runs(loaded, used[0], sel.tune_seeds), None, validation_column(tune),
                             loss, order=table)
        check.table = check.table.merge(every.table.rename(columns={c: f"{c}_all" for c in STATS}), on=[by],
                                        how="left")
        check.judged = "the judged runs: each task's evaluation seeds at the group's chosen " + ", ".join(sel.keys)
        check.tuned_keys, check.values_shown = list(sel.keys), False
        check.overall = every.overall
    return RankResult(table, by, list(task_cols), scores, st["ranks"], st["friedman_stat"],
                      st["friedman_p"], st["critical_difference"], st["p_nemenyi"], st["p_wilcoxon"],
                      st["groups"], alpha, posthoc, metric, loss, notes, sel, check, margin)


def within_margin(scores: pd.DataFrame, best: str, margin: Margin, higher: bool) -> pd.Series:
    """Per group, the tasks where its score lies strictly within the margin of the best's (scores:
    mean log10 losses, or mean accuracies as fractions: the margin is then in percentage points)."""
    diff = scores.sub(scores[best], axis=0) * (100 if higher else 1)
    return (diff.abs() < margin.size).sum(axis=0)


def _table(scores: pd.DataFrame, st: dict, by: str, higher: bool = False) -> pd.DataFrame:
    order = st["order"]
    best = order[0]
    diff = scores.sub(scores[best], axis=0) * (-1 if higher else 1)  # < 0: better than the best
    letters = {g: "".join(letter(i) for i, grp in enumerate(st["groups"]) if g in grp) for g in order}
    table = pd.DataFrame({
        by: order,
        "mean_rank": st["mean_rank"][order].to_numpy(float),
        "n_tasks": len(scores),
        "wins": (diff[order] < 0).sum(axis=0).to_numpy(int),
        "ties": (diff[order] == 0).sum(axis=0).to_numpy(int),
        "losses": (diff[order] > 0).sum(axis=0).to_numpy(int),
        "p_nemenyi": st["p_nemenyi"].loc[best, order].to_numpy(float),
        "p_wilcoxon_holm": st["p_vs_best"][order].to_numpy(float),
        "group": [letters[g] for g in order],
    })
    return table[[by, *RANK_COLS]]


def letter(i: int) -> str:
    """Name of the i-th group: a, b, ..., z, [27], ..."""
    return chr(ord("a") + i) if i < 26 else f"[{i + 1}]"


def method_notes(res: RankResult) -> list[str]:
    k, n = res.ranks.shape[1], res.ranks.shape[0]
    m = res.metric
    how = scale(m, res.loss)
    if how == LOG10:
        score = "mean log10 loss per run (auc)" if m.kind == "auc" else f"log10 {res.loss} ({m.label})"
        score += f", floored at {FLOOR:g}"
    elif how == ACCURACY:
        score = f"{res.loss} ({m.label}; auc: the mean over epochs)" if m.kind == "auc" else f"{res.loss} ({m.label})"
    else:
        op = ">=" if higher_is_better(res.loss) else "<="
        score = f"first epoch with {res.loss} {op} {m.param:g} (a run that never gets there: its last epoch + 1)"
    tasks = ", ".join(res.task_cols) or "nothing"
    better, worse = ("higher", "lower") if res.higher_is_better else ("lower", "higher")
    lines = [f"Per task ({tasks}) each {res.by} scores the mean over its seeds of {score}; {better} is better. "
             "Ranked within each task (1 = best, ties share the average rank), then averaged over tasks.",
             f"wins/ties/losses: tasks where the {res.by} scores {better}/equal/{worse} than the best ({res.best})."]
    lines.append(f"Friedman test over {n} tasks and {k} groups: scipy, tie-corrected." if k >= 3 else
                 "Friedman test: needs at least 3 groups; see the Wilcoxon p-value.")
    lines.append(f"Post-hoc vs the best: Nemenyi (all pairs; critical difference CD = {res.critical_difference:.3g} "
                 f"mean ranks at alpha {res.alpha:g}) and Wilcoxon signed-rank over tasks, Holm-corrected over the "
                 f"{k - 1} comparisons with the best.")
    test = "Nemenyi" if res.posthoc == "nemenyi" else "Wilcoxon signed-rank, Holm over all pairs"
    lines.append(f"group: {res.by}s sharing a letter cannot be told apart ({test}: p >= {res.alpha:g} for every "
                 "pair in the group; groups are runs of consecutive mean ranks, as the diagram's bars).")
    if res.tuning is not None:
        from activation_bench.analysis.tune import method_note as tune_note

        lines.append(tune_note(res.tuning, m.label))
    if res.margin is not None:
        unit = "percentage points of the mean accuracy" if res.higher_is_better else "a ratio of geometric means"
        lines.append(f"within margin: tasks where the {res.by}'s mean lies within {res.margin.label} ({unit}) of the "
                     f"best's, practically tied with it (means over seeds, no interval: compare --margin judges a "
                     "task's comparisons with their uncertainty).")
    if n < 6:
        lines.append(f"With {n} tasks no two-sided Wilcoxon test over tasks can reach p < 0.05: more tasks give "
                     "sharper answers.")
    return lines
