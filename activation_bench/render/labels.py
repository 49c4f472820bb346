"""Text that fits its figure: long labels wrapped, figure legends and titles measured and kept
inside the figure, and at most MAX_CURVES curves in a panel.

Group labels can be long: an expression activation is labelled by its text (up to 300
characters), and several group columns join into `activation=..., lr=...`. Every figure of
`plot`, `plot --x`, `plot --grads` and `report` wraps them (`wrap`) rather than cutting them or
replacing them with keys, so a figure read on its own (a PNG, a PDF) still names its curves. A
figure legend gets as many columns as its measured width allows and the figure grows by its
height (`figure_legend`); a title is wrapped to the measured width it has (`suptitle`), a panel's
title to its panel's estimated width (`panel_title`). Where more than MAX_CURVES groups would
share a panel, the baseline's curves and the best of the others are drawn, with a note
(`keep_lines`). Pure matplotlib: no torch.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

WIDTH = 36  # characters per line of a legend entry
MAX_CURVES = 10  # curves in one panel: tab10's distinct colours
CHAR_EM = 0.62  # a DejaVu Sans character's width, in em, a little above its mean (estimates only)
SPARE = 0.96  # share of the figure's width a legend or title may take


def _parts(text: str) -> list[str]:
    """`key=value` parts split at ", " outside parentheses (so `max(x, 0)` stays whole)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth <= 0 and text.startswith(", ", i):
            out.append(text[start:i])
            start = i + 2
    return [*out, text[start:]]


def wrap(text: str, width: int = WIDTH) -> str:
    """A label in lines of at most `width` characters: its comma-separated parts kept together
    where they fit, a longer part broken at spaces, then inside a long token. Short labels are
    returned unchanged; no character is lost but a space where a line breaks."""
    if len(text) <= width:
        return text
    lines: list[str] = []
    current = ""
    for part in _parts(text):
        if current and len(current) + 2 + len(part) <= width - 1:
            current += ", " + part
            continue
        if current:
            lines.append(current + ",")
        pieces = textwrap.wrap(part, width - 1, break_long_words=True, break_on_hyphens=False) or [part]
        lines.extend(pieces[:-1])
        current = pieces[-1]
    lines.append(current)
    return "\n".join(lines)


def group_labels(runs: Any, cols: Sequence[str]) -> np.ndarray:
    """Each run's label for its values of `cols`: the value for one column, `a=1, b=2` for more,
    "all" for none; a missing value reads "(none)"."""
    if not cols:
        return np.full(len(runs), "all", dtype=object)
    parts = [runs[c].fillna("(none)").astype(str) for c in cols]
    if len(cols) == 1:
        return parts[0].to_numpy(object)
    text = parts[0].radd(f"{cols[0]}=")
    for c, p in zip(cols[1:], parts[1:]):
        text = text + f", {c}=" + p
    return text.to_numpy(object)


def chars(width_in: float, fontsize: float) -> int:
    """About how many characters fit `width_in` inches at `fontsize` points (at least 12)."""
    return max(12, int(width_in * 72 / (CHAR_EM * fontsize)))


def panel_title(ax: Any, text: str, fontsize: float | None = None) -> None:
    """An axes title wrapped to its panel's width (the figure's width over its grid's columns,
    less room for the tick labels)."""
    import matplotlib
    from matplotlib.font_manager import FontProperties

    size = FontProperties(size=fontsize or matplotlib.rcParams["axes.titlesize"]).get_size_in_points()
    spec = ax.get_subplotspec()
    width = ax.figure.get_size_inches()[0] * len(spec.colspan) / spec.get_gridspec().ncols - 0.8
    kw = {"fontsize": fontsize} if fontsize else {}
    ax.set_title("\n".join(wrap(line, chars(width, size)) for line in text.split("\n")), **kw)


def renderer(fig: Any) -> Any:
    """An Agg renderer for the figure (to measure text before it is saved)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    return fig.canvas.get_renderer()


def figure_legend(fig: Any, handles: Sequence[Any], labels: Sequence[str], title: str | None = None,
                  max_cols: int = 5, reserve_in: float = 0.8) -> Any:
    """A figure legend below the axes, its labels wrapped, in as many columns (at most max_cols)
    as its measured width fits; the figure grows by the legend's height beyond `reserve_in` inches
    (what its size already holds for a legend), and to the legend's width should one column not fit."""
    r = renderer(fig)
    labels = [wrap(str(lab)) for lab in labels]
    width_in, height_in = fig.get_size_inches()
    ncols = max(1, min(len(labels), max_cols))
    while True:
        legend = fig.legend(list(handles), labels, loc="outside lower center", ncols=ncols, title=title,
                            frameon=False)
        box = legend.get_window_extent(r)
        if box.width <= SPARE * width_in * fig.dpi or ncols == 1:
            break
        legend.remove()
        ncols -= 1
    need_w = box.width / fig.dpi / SPARE
    fig.set_size_inches(max(width_in, need_w), height_in + max(0.0, box.height / fig.dpi - reserve_in))
    return legend


def suptitle(fig: Any, text: str, **kw: Any) -> Any:
    """fig.suptitle, each line wrapped to fit the figure's measured width (call it after the
    figure has its final size)."""
    title = fig.suptitle(text, **kw)
    r = renderer(fig)
    room = SPARE * fig.bbox.width
    for _ in range(4):
        width = title.get_window_extent(r).width
        if width <= room:
            break
        longest = max(len(line) for line in title.get_text().split("\n"))
        limit = max(12, int(longest * room / width) - 1)
        title.set_text("\n".join(textwrap.fill(line, limit, break_on_hyphens=False) for line in text.split("\n")))
    return title


def few_lines(runs: Any, scores: Any, names: list[str], lines: Sequence[str], higher_is_better: bool,
              baseline: tuple[str, str] | None, what: str) -> tuple[list[str], str]:
    """The lines drawn when more than MAX_CURVES groups would share a panel: the baseline's
    (default: compare's default baseline among the line columns) and the best others by `scores`
    (columns panel, line, score: `what`), ranked within each panel and averaged over the panels.
    Returns (the lines kept, in their order; a note saying what was left out, or "")."""
    if len(names) <= MAX_CURVES:
        return names, ""
    from activation_bench.analysis.compare import parse_baseline

    base = baseline if baseline is not None else parse_baseline(None, lines, runs)
    always: set[str] = set()
    if base is not None and base[0] in lines:
        always = set(group_labels(runs, lines)[(runs[base[0]].astype(object) == base[1]).to_numpy()])
    kept, left = keep_lines(names, mean_ranks(scores, "score", higher_is_better), always)
    who = f"the baseline ({base[0]}={base[1]}) and " if base is not None and always & set(kept) else ""
    best = "highest" if higher_is_better else "lowest"
    return kept, f"{len(kept)} of {len(names)} groups drawn: {who}the {best} by {what} ({left} left out)"


def keep_lines(names: Sequence[str], ranks: dict[str, float], always: Iterable[str],
               n: int = MAX_CURVES) -> tuple[list[str], int]:
    """The lines a panel draws, in their order: all when there are at most n; else every line in
    `always` (the baseline's) and the best-ranked others (lowest mean rank), n in all (at least
    the baseline's). Returns (kept, how many were left out)."""
    if len(names) <= n:
        return list(names), 0
    always = [x for x in names if x in set(always)]
    others = sorted((x for x in names if x not in always), key=lambda x: (ranks.get(x, float("inf")), names.index(x)))
    chosen = set(always) | set(others[:max(0, n - len(always))])
    kept = [x for x in names if x in chosen]
    return kept, len(names) - len(kept)


def mean_ranks(df: Any, score: str, higher_is_better: bool = False) -> dict[str, float]:
    """Per line, its rank by `score` within each panel (1 = best) averaged over the panels."""
    ranks = df.groupby("panel")[score].rank(ascending=not higher_is_better, method="average")
    return df.assign(_rank=ranks).groupby("line")["_rank"].mean().to_dict()
