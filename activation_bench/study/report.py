"""A study's report.html: every comparison, combined table, ranking and figure of the study on one
self-contained page, with its provenance (the study file, the sweep commands, versions and machine).
Deterministic: no generation time (the runs' own dates are shown), so re-rendering a finished
study writes the same bytes."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path
from typing import Any

from activation_bench.study.spec import Study


def _image(name: str, content: str | bytes) -> dict[str, Any]:
    """A figure file for the page: SVG inline (its ids prefixed), PNG/PDF as a data URI."""
    from markupsafe import Markup

    if name.endswith(".svg"):
        import re

        from activation_bench.render.svg import inline

        text = content.decode("utf-8") if isinstance(content, bytes) else content
        return {"name": name, "svg": Markup(inline(text, re.sub(r"[^A-Za-z0-9-]", "-", name))), "uri": None,
                "pdf": False}
    data = content if isinstance(content, bytes) else content.encode()
    kind = "image/png" if name.endswith(".png") else "application/pdf"
    return {"name": name, "svg": None, "uri": f"data:{kind};base64,{base64.b64encode(data).decode()}",
            "pdf": name.endswith(".pdf")}


def _rank_table(res: Any) -> dict[str, Any]:
    from activation_bench.render import rank_tables

    headers, right, rows = rank_tables.cells(res)
    return {"headers": headers, "right": right, "rows": rows,
            "lines": [*rank_tables.summary_lines(res), *rank_tables.budget_lines(res)]}


def _combined(parts: list[tuple[str, Any]], title: str, where: str) -> dict[str, Any]:
    from activation_bench.render import combined

    headers, _, rows, notes = combined.grid(parts, where)
    return {"title": title, "headers": headers, "rows": rows, "notes": notes}


def shown(path: Path) -> str:
    """The study file's path as the page shows it, however it was typed: relative to the working
    directory where it lies below it, else absolute (so the page renders the same bytes)."""
    full = path.resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(full)


def _provenance(study: Study, loads: Any) -> dict[str, Any]:
    from activation_bench.analysis.provenance import provenance

    every = [s for s in study.spec.sweeps]
    loaded = loads.cache.get(tuple(every)) or loads.get(every)
    pv = provenance(loaded, shlex.join(["actbench", "study", "run", shown(study.path)]))
    pv.pop("generated", None)  # the page is the same whenever it is rendered
    return pv


def page(study: Study, results: dict[str, Any], ranks: dict[str, Any], files: dict[str, str | bytes],
         warnings: list[str], loads: Any) -> str:
    """The page's HTML: `files` are the study's other outputs (its figures are shown inline)."""
    import jinja2

    from activation_bench.render import combined
    from activation_bench.render import report as rep

    spec = study.spec
    comparisons = []
    for name, res in results.items():
        table = rep.compare_table(res)
        table.update(name=name, title=spec.comparisons[name].title or f"{res.metric.label} of {res.loss}",
                     sweeps=spec.comparisons[name].sweeps)
        comparisons.append(table)
    tables = []
    for name, t in spec.tables.items():
        parts = [(c, results[c]) for c in t.comparisons]
        tables.append({"name": name, **_combined(parts, combined.title(t.title, parts), f"tables.{name}")})
    rankings = [{"name": n, "title": spec.rankings[n].title or f"ranking of {r.by}", **_rank_table(r),
                 "cd": _image(f"{n}-cd.svg", files[f"{n}-cd.svg"]) if f"{n}-cd.svg" in files else None}
                for n, r in ranks.items()]
    figures = [{"title": f.title or n, **_image(f"{n}.{f.format}", files[f"{n}.{f.format}"])}
               for n, f in spec.figures.items()]
    sweeps = [{"name": n, "dir": str(study.sweep_dir(n)), "command": shlex.join(
        ["actbench", "sweep", "--runs-dir", str(study.runs_dir), "--name", sw.dir or n, *sw.grid, *sw.overrides])}
        for n, sw in spec.sweeps.items()]
    env = jinja2.Environment(loader=jinja2.PackageLoader("activation_bench.render", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("study.html.j2").render(
        title=spec.title or study.path.stem, description=spec.description, study_file=study.text,
        study_path=shown(study.path), sweeps=sweeps, comparisons=comparisons, tables=tables, rankings=rankings,
        figures=figures, warnings=warnings, provenance=_provenance(study, loads))
