"""Typer command `compare` (registered in cli/main.py): paired statistics on loss tables.

pandas, scipy and rich are imported inside the command, never torch. Bad input raises UsageError;
`reported()` turns it into one line on stderr and exit code 2. The options are declared in
cli/options.py.
"""

from __future__ import annotations

from typing import Any

from activation_bench.cli.options import (
    BaselineOpt,
    ByOpt,
    CompareAlphaOpt,
    CompareLossOpt,
    FormatOpt,
    JudgeSeedsMaxOpt,
    MarginOpt,
    MetricOpt,
    OutputOpt,
    PairByOpt,
    PathsArg,
    PowerLevelOpt,
    PowerOpt,
    SequentialOpt,
    TuneGridOpt,
    TuneOnOpt,
    TuneOpt,
    TuneSeedsOpt,
)
from activation_bench.cli.output import emit, warn
from activation_bench.errors import UsageError, reported


def compare(
    paths: PathsArg,
    metric: MetricOpt = "final",
    by: ByOpt = None,
    baseline: BaselineOpt = None,
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    loss: CompareLossOpt = None,
    power: PowerOpt = None,
    power_level: PowerLevelOpt = "0.8",
    alpha: CompareAlphaOpt = "0.05",
    tune: TuneOpt = None,
    tune_seeds: TuneSeedsOpt = None,
    tune_on: TuneOnOpt = None,
    tune_grid: TuneGridOpt = None,
    pair_by: PairByOpt = None,
    margin: MarginOpt = None,
    sequential: SequentialOpt = False,
    judge_seeds_max: JudgeSeedsMaxOpt = None,
) -> None:
    """Paired statistics on loss tables: per group n, mean, std, median, geometric mean with a 95% CI;
    against a baseline paired by seed: geometric-mean ratio, win rate, paired t-test and Wilcoxon
    p-values (Holm-corrected) and Cohen's d_z. Loss metrics are compared on a log10 scale; accuracies
    (--loss val_acc or test_acc) as mean accuracy and paired differences in percentage points.
    With --power: how many seeds a comparison needs. With --margin: each comparison's verdict
    (better, worse, equivalent, undecided); with --sequential, anytime-valid.

    Examples:

      actbench compare runs/my-sweep

      actbench compare runs/a runs/b results.csv --metric final --baseline activation=relu

      actbench compare runs/my-sweep --metric epoch=10 --format markdown --output table.md

      actbench compare runs/my-sweep --metric to=1e-6

      actbench compare runs/my-real-data-sweep --metric early_stop

      actbench compare runs/my-sweep --power 1.05

      actbench compare runs/my-lr-sweep --metric early_stop --tune lr --baseline activation=relu

      actbench compare runs/my-digits-sweep --metric early_stop --loss test_acc --tune lr --tune-on val_acc

      actbench compare runs/my-lr-sweep --metric early_stop --by activation --pair-by seed

      actbench compare runs/my-sweep --margin 1.05

      actbench compare runs/my-digits-sweep --loss test_acc --metric early_stop --margin 1 --sequential
    """
    with reported():
        from activation_bench.analysis import compare as cmp
        from activation_bench.render import tables
        from activation_bench.runs import store

        if fmt not in tables.FORMATS:
            raise UsageError(f"unknown format '{fmt}'; valid: {', '.join(tables.FORMATS)}")
        if output is not None:
            store.check_folder(output)  # before any work
        m = cmp.parse_metric(metric)
        tuning = cmp.parse_tune(tune, tune_seeds, by, tune_on, tune_grid)
        if loss is None and m.is_loss:  # a sequentially judged sweep: the column its verdicts judged
            from activation_bench.analysis.sequential import recorded_loss

            loss = recorded_loss(paths)
        verdicts = _verdict_options(margin, sequential, judge_seeds_max, alpha, loss, paths if m.is_loss else ())
        spec = _power_spec(power, power_level, alpha, bool(verdicts), loss, m)
        loaded = cmp.load(paths, loss or "train_loss")
        recorded = verdicts.pop("baseline", None)  # a sequential sweep's --baseline, unless given here
        result = cmp.compare(loaded, m, by, baseline or recorded, cmp.default_loss(loaded, m, loss), power=spec,
                             tune=tuning, pair_by=pair_by, **verdicts)
        warn(result.all_warnings)
        emit(output, fmt, lambda: tables.render(result, fmt), lambda: tables.print_table(result))


def _power_spec(power: str | None, power_level: str, alpha: str, verdicts: bool, loss: str | None,
                metric: Any) -> Any:
    """--power, --power-level and --alpha (which verdicts use too) checked: a power.PowerSpec, or None
    without --power."""
    if power is None and not verdicts and (power_level, alpha) != ("0.8", "0.05"):
        raise UsageError("--power-level and --alpha set up --power: give --power RATIO too, e.g. --power 1.05")
    if power is None and power_level != "0.8":
        raise UsageError("--power-level sets up --power: give --power RATIO too, e.g. --power 1.05")
    if power is None:
        return None
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.power import parse_power

    spec = parse_power(power, power_level, alpha, accuracy=is_accuracy(loss or ""))
    if not metric.is_loss:
        raise UsageError(f"--power works on loss metrics (log10 ratios) and accuracies (percentage "
                         f"points), not --metric {metric.label}")
    return spec


def _verdict_options(margin: str | None, sequential: bool, judge_seeds_max: int | None, alpha: str,
                     loss: str | None, paths: Any = ()) -> dict[str, Any]:
    """compare's keyword arguments for --margin, --sequential, --judge-seeds-max and --alpha, checked.
    Inputs whose judging was sequential (sequential.RECORD_FILE) are read so without being told: their
    recorded margin (unless --margin), level (unless --alpha), --judge-seeds-max and baseline (as
    "baseline", where the sweep was given one: compare's unless --baseline)."""
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.rank import parse_alpha
    from activation_bench.analysis.sequential import read_record

    record = read_record(paths, loss)
    if record is not None and (margin is not None or record["margin"].unit == ("pp" if is_accuracy(loss or "")
                                                                               else "ratio")):
        from activation_bench.analysis.sequential import SequentialSpec
        from activation_bench.analysis.verdicts import parse_margin

        given = parse_margin(margin, accuracy=is_accuracy(loss or "")) if margin is not None else None
        return {"margin": given or record["margin"], "alpha": parse_alpha(alpha) if alpha != "0.05" else
                record["alpha"], "sequential": SequentialSpec(judge_seeds_max or record["max_seeds"]),
                **({"baseline": record["baseline"]} if record["baseline"] else {})}
    if margin is None:
        if sequential or judge_seeds_max is not None:
            raise UsageError(f"{'--sequential' if sequential else '--judge-seeds-max'} judges against a margin: "
                             "give --margin too, e.g. --margin 1.05")
        return {}
    from activation_bench.analysis.sequential import SequentialSpec
    from activation_bench.analysis.verdicts import parse_margin

    if judge_seeds_max is not None and (not sequential or judge_seeds_max < 2):
        raise UsageError(f"--judge-seeds-max {judge_seeds_max}: " + ("needs at least 2 seeds" if sequential else
                         "says when sequential judging stops: give --sequential too"))
    return {"margin": parse_margin(margin, accuracy=is_accuracy(loss or "")), "alpha": parse_alpha(alpha),
            "sequential": SequentialSpec(judge_seeds_max) if sequential else None}
