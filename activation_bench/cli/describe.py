"""The commands that describe, train nothing and write nothing: `activations` (the registry, or one
expression's probe) and `config` (a composed config). Heavy libraries are imported inside the commands."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from activation_bench.cli.options import KEYS_HELP, OverridesArg
from activation_bench.errors import UsageError, reported

ACTIVATIONS_HELP = (
    "List the registered activations: formula, parameters (override with "
             "activation.PARAM=VALUE), aliases and the effect on the parameter count.\n\n"
             "Examples:\n\n  actbench activations\n\n  actbench activations --format csv > acts.csv\n\n"
             "  actbench activations --fn \"x*sigmoid(beta*x):beta=1.5\""
)


def activations(
    fmt: Annotated[str, typer.Option("--format", help="table or csv.")] = "table",
    fn: Annotated[str | None, typer.Option(
        "--fn", help="An expression of x (as activation=expr's activation.fn), parameters after a colon "
        "('x*sigmoid(beta*x):beta=1.5'): print what the probe finds (monotonic, bounded, smooth, value and "
        "slope at 0, the registered activation it equals).")] = None,
) -> None:
    import csv

    from activation_bench.engine.activations import registry

    with reported():
        if fmt not in ("table", "csv"):
            raise UsageError(f"unknown format '{fmt}'; valid: table, csv")
        if fn is not None:
            _expression_facts(fn, fmt)
            return
    rows = registry.describe()
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["name", "aliases", "formula", "params", "param_effect", "init"])
        for r in rows:
            params = ";".join(f"{k}={v}" for k, v in r["params"].items())
            writer.writerow([r["name"], ";".join(r["aliases"]), r["formula"], params, r["param_effect"], r["init"]])
        return
    from rich.table import Table

    from activation_bench import terminal

    table = Table(title=f"{len(rows)} activations (activation=NAME; your own: activation=custom "
                  "activation._target_=pkg.mod.Class)")
    for col in ("name", "formula", "parameters", "aliases", "parameter count", "init (auto)"):
        # names never wrap; the other columns wrap between words (each parameter=value stays whole)
        table.add_column(col, no_wrap=col == "name")
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
        table.add_row(r["name"], r["formula"], params, ", ".join(r["aliases"]), r["param_effect"], r["init"])
    terminal.print_table(table)


def _expression_facts(text: str, fmt: str) -> None:
    """`actbench activations --fn TEXT`: the probe's summary (engine/activations/expr_summary.py), printed; the
    registered activations it equals are the ones the search would call its duplicates (one rule,
    expr_summary.same)."""
    import csv

    from activation_bench.engine.activations import expr, expr_summary
    from activation_bench.render.plots import parse_activation

    body, params = parse_activation(text)
    try:
        e, values, _ = expr.from_node({"fn": body, **params})
    except UsageError as exc:
        raise UsageError(f"{exc} (with --fn, parameters follow a colon: 'x*sigmoid(beta*x):beta=1.0')") from None
    facts = expr_summary.summarize(e, values)
    smooth = "yes" if facts["smooth"] else "no" + (f" (kink near x = {facts['kink']:g})" if facts["kink"] is not None
                                                   else "")
    rows = [("expression", facts["fn"]),
            ("parameters", ", ".join(f"{k}={v:g}" for k, v in values.items()) or "none"),
            ("probe", f"refused: {facts['probe']}" if facts["probe"] else "passes (finite, not constant)"),
            ("monotonic", facts["monotonic"]), ("bounded", facts["bounded"]), ("smooth", smooth),
            ("f(0)", f"{facts['value_at_0']:.6g}"), ("f'(0)", f"{facts['slope_at_0']:.6g}"),
            ("equals", ", ".join(facts["equals"]) or "none")]
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["fact", "value"])
        writer.writerows(rows)
        return
    from rich.table import Table

    from activation_bench import terminal

    table = Table(title="expression activation (probe points, float64)", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column()
    for row in rows:
        table.add_row(*row)
    terminal.print_table(table)


CONFIG_HELP = (
    "Print the composed, validated config for the given overrides.\n\n"
             "Example:\n\n  actbench config activation=elu data=uniform\n" + KEYS_HELP
)


def show_config(overrides: OverridesArg = None) -> None:
    from activation_bench.config.compose import compose
    from activation_bench.runs.contents import saved_yaml

    with reported():
        cfg = compose(overrides or [])
    typer.echo(saved_yaml(cfg), nl=False)
