"""A study's outputs from its finished sweeps: each comparison (`compare`), combined table, ranking
(`rank`) and figure (`plot`), computed with the same functions as the commands, then report.html.
Everything is built in memory first and written only when all of it succeeded, each file atomically,
so a failure leaves the previous outputs as they were. Rendering is deterministic (no dates, fixed
SVG ids), so a finished study renders byte for byte the same files again."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activation_bench.errors import UsageError
from activation_bench.study.spec import Study, TuneFields


@dataclass
class Built:
    files: dict[str, str | bytes] = field(default_factory=dict)  # file name in the output folder -> content
    warnings: list[str] = field(default_factory=list)


class _Loads:
    """Each set of sweeps loaded once; `get` also checks that the runs have values of a column."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.cache: dict[tuple, Any] = {}

    def get(self, sweeps: list[str], column: str = "train_loss") -> Any:
        from activation_bench.analysis.loading import load

        key = tuple(sweeps)
        if key not in self.cache:
            self.cache[key] = load([self.study.sweep_dir(s) for s in sweeps], "train_loss")
        loaded = self.cache[key]
        if column not in loaded.losses or not bool((loaded.losses[column] == loaded.losses[column]).any()):
            raise UsageError(f"no run of {', '.join(sweeps)} has values of {column}")
        return loaded


def _tune(part: TuneFields, by: Any = None) -> Any:
    from activation_bench.analysis.tune import parse_tune

    return parse_tune(part.tune, part.tune_seeds, [by] if isinstance(by, str) else by, part.tune_on, part.tune_grid)


@contextlib.contextmanager
def _named(key: str) -> Iterator[None]:
    """Prefix a UsageError raised inside with the study key it belongs to."""
    try:
        yield
    except UsageError as exc:
        raise UsageError(f"{key}: {exc}") from None


def build(study: Study) -> Built:
    """Every table, figure and the report, in memory."""
    out = Built()
    loads = _Loads(study)
    results = _comparisons(study, loads, out)
    _combined(study, results, out)
    ranks = _rankings(study, loads, out)
    _figures(study, loads, results, out)
    from activation_bench.study.report import page

    out.files[study.spec.report] = page(study, results, ranks, out.files, out.warnings, loads)
    return out


def _comparisons(study: Study, loads: _Loads, out: Built) -> dict[str, Any]:
    from activation_bench.analysis import compare as cmp
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.metrics import default_loss, parse_metric
    from activation_bench.render import tables

    results = {}
    for name, c in study.spec.comparisons.items():
        with _named(f"comparisons.{name}"):
            m = parse_metric(c.metric)
            paths = [study.sweep_dir(s) for s in c.sweeps]
            given = c.loss
            if given is None and m.is_loss:  # a sequentially judged sweep: the column its verdicts judged
                from activation_bench.analysis.sequential import recorded_loss

                given = recorded_loss(paths)
            loaded = loads.get(c.sweeps, given or "train_loss")
            power = None
            if c.power is not None:
                from activation_bench.analysis.power import parse_power

                power = parse_power(c.power, accuracy=is_accuracy(given or ""))
            loss = default_loss(loaded, m, given)
            res = cmp.compare(loaded, m, c.by, c.baseline, loss, power=power, tune=_tune(c, c.by), pair_by=c.pair_by,
                              **_verdicts(c.margin, paths if m.is_loss else [], loss))
        results[name] = _tables(out, name, res, tables.render)
    return results


def _verdicts(margin: str | None, paths: list[Path], loss: str) -> dict[str, Any]:
    """compare's verdict arguments for a comparison, as `compare` takes them on its sweeps: its own
    margin; over a sequentially judged sweep (sequential.RECORD_FILE) anytime-valid verdicts, with the
    sweep's recorded margin for the column's kind unless the comparison gives one (the verdict, the
    seeds each comparison used and why it stopped)."""
    from activation_bench.analysis.loading import is_accuracy
    from activation_bench.analysis.sequential import SequentialSpec, read_record
    from activation_bench.analysis.verdicts import parse_margin

    own = parse_margin(margin, accuracy=is_accuracy(loss)) if margin is not None else None
    record = read_record(paths, loss)
    if record is not None and (own is not None or (record["margin"].unit == "pp") == is_accuracy(loss)):
        return {"margin": own or record["margin"], "alpha": record["alpha"],
                "sequential": SequentialSpec(record["max_seeds"])}
    return {"margin": own}


def _tables(out: Built, name: str, res: Any, render: Any) -> Any:
    """A comparison's or ranking's three files (as its command writes them) and its warnings."""
    for ext, fmt in (("md", "markdown"), ("csv", "csv"), ("json", "json")):
        out.files[f"{name}.{ext}"] = render(res, fmt)
    out.warnings += [f"{name}: {w}" for w in res.all_warnings]
    return res


def _combined(study: Study, results: dict[str, Any], out: Built) -> None:
    from activation_bench.render import combined

    for name, t in study.spec.tables.items():
        parts = [(c, results[c]) for c in t.comparisons]
        title = combined.title(t.title, parts)
        where = f"{study.path}: tables.{name}"
        out.files[f"{name}.md"] = combined.to_markdown(parts, title, where)
        out.files[f"{name}.csv"] = combined.to_csv(parts, where)
        out.files[f"{name}.json"] = combined.to_json(parts, title, where)


def _rankings(study: Study, loads: _Loads, out: Built) -> dict[str, Any]:
    from activation_bench.analysis import rank as rk
    from activation_bench.analysis.metrics import default_loss, parse_metric
    from activation_bench.render import rank_tables

    ranks = {}
    for name, r in study.spec.rankings.items():
        with _named(f"rankings.{name}"):
            m = parse_metric(r.metric)
            loaded = loads.get(r.sweeps, r.loss or "train_loss")
            res = rk.rank(loaded, m, r.by, r.task, default_loss(loaded, m, r.loss), r.alpha, r.posthoc,
                          tune=_tune(r, r.by))
        ranks[name] = _tables(out, name, res, rank_tables.render)
        if r.plot:
            out.files[f"{name}-cd.svg"] = image(rank_tables.draw_cd(res), "svg")
    return ranks


def _figures(study: Study, loads: _Loads, results: dict[str, Any], out: Built) -> None:
    from activation_bench.analysis.metrics import parse_metric

    for name, f in study.spec.figures.items():
        with _named(f"figures.{name}"):
            loaded = loads.get(f.sweeps, f.loss or "train_loss")
            if f.kind == "sensitivity":
                from activation_bench.analysis.metrics import default_loss
                from activation_bench.render.sensitivity import sensitivity_figure

                m = parse_metric(f.metric or ("early_stop" if "val_loss" in loaded.losses else "final"))
                fig = sensitivity_figure(loaded, str(f.x), m, default_loss(loaded, m, f.loss), f.by)
            else:
                fig = _curves(loaded, f, results.get(f.tuned) if f.tuned else None, study)
        out.files[f"{name}.{f.format}"] = image(fig, f.format)


def _curves(loaded: Any, f: Any, tuned: Any, study: Study) -> Any:
    """Curves of every run, or (`tuned`: a comparison) each group at the value that comparison's
    tuning chose, over its judging seeds: chosen again on these sweeps by the comparison's rule."""
    from activation_bench.analysis.metrics import parse_metric
    from activation_bench.render import plots

    loss = f.loss or "train_loss"
    accuracy = plots.companion_accuracy(loaded, loss)
    if tuned is None:
        return plots.curves_figure(loaded, f.by, loss, accuracy=accuracy)
    from activation_bench.render import tuned_curves

    c = study.spec.comparisons[f.tuned]
    m = parse_metric(c.metric)
    chosen = tuned_curves.select_curves(loaded, _tune(c, c.by), m, f.by or c.by)
    return tuned_curves.tuned_curves_figure(loaded, chosen, loss, m.label, accuracy=accuracy, baseline=tuned.baseline)


def image(fig: Any, fmt: str) -> bytes:
    """The figure's file content, the same bytes every time: no dates, fixed SVG ids."""
    import matplotlib

    buf = io.BytesIO()
    meta = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}, "png": {}}[fmt]
    with matplotlib.rc_context({"svg.hashsalt": "actbench", "svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight", metadata=meta)
    return _palette(buf.getvalue()) if fmt == "png" else buf.getvalue()


def _palette(png: bytes) -> bytes:
    """A PNG with a 256-colour palette: a third of the size of matplotlib's RGBA for line plots
    (studies keep their figures in the repository), the same bytes for the same figure."""
    from PIL import Image  # matplotlib's own dependency

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(256).save(out, format="png", optimize=True)
    return out.getvalue()


def write(study: Study, built: Built) -> list[Path]:
    """Every file into the output folder (made if missing), each atomically; returns the paths."""
    from activation_bench.runs.store import atomic_file, atomic_write

    study.output.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, content in built.files.items():
        path = study.output / name
        if isinstance(content, bytes):
            with atomic_file(path) as tmp:
                tmp.write_bytes(content)
        else:
            atomic_write(path, content)
        paths.append(path)
    return paths
