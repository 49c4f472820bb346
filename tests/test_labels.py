"""Readable figures with long labels and many groups: labels wrapped (render/labels.py), every
title and legend inside its figure (measured with Agg), at most MAX_CURVES curves a panel (the
baseline's and the best), and a tuned report's curves at each group's chosen value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.analysis.metrics import Metric
from activation_bench.analysis.tune import TuneSpec
from activation_bench.cli.main import app
from activation_bench.render import labels, plots, sensitivity
from activation_bench.render import report as rep

LONG = "exp(-abs(sinh(x) - x)) * max(x, 0)"
LONGER = "x*sigmoid(1.702*x) + 0.25*tanh(softplus(x))*exp(-abs(x)) - 0.125*sin(x)*cos(x)"  # no room to spare


def write_runs(path: Path, acts: list[str], lrs: tuple[str, ...] = ("0.001", "0.01"), seeds: int = 6,
               best: dict[str, str] | None = None) -> Path:
    """A long-format CSV: train and val losses per activation x lr x seed over 4 epochs. Each
    activation's val_loss is lowest at `best[act]` (default: the first lr); activation i ends at
    about (i + 1) / 10, so a lower index is better."""
    rows, rng = [], np.random.default_rng(0)
    for i, act in enumerate(acts):
        for lr in lrs:
            factor = 1.0 if lr == (best or {}).get(act, lrs[0]) else 3.0
            for seed in range(seeds):
                end = (i + 1) / 10 * factor * rng.uniform(0.9, 1.1)
                for e in range(1, 5):
                    loss = end * 2.0 ** (4 - e)
                    rows.append({"activation": act, "lr": lr, "seed": seed, "epoch": e, "train_loss": loss,
                                 "val_loss": loss * 1.1})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def texts(fig) -> list:
    """The figure's titles and legends (what must never be cut)."""
    out = [fig._suptitle] if fig._suptitle is not None else []
    out += [ax.title for ax in fig.axes if ax.get_visible() and ax.get_title()]
    return out + list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]


def assert_inside(fig) -> None:
    """Drawn with its layout, every title and legend lies inside the figure (1 px of slack)."""
    fig.draw_without_rendering()
    r = labels.renderer(fig)
    width, height = fig.bbox.width, fig.bbox.height
    for artist in texts(fig):
        box = artist.get_window_extent(r)
        assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1, \
            (getattr(artist, "get_text", lambda: "legend")(), box, width, height)


# ---------------------------------------------------------------------------------------------
# wrapping


def test_short_labels_are_unchanged():
    assert labels.wrap("relu") == "relu"
    assert labels.wrap("activation=relu, lr=0.01") == "activation=relu, lr=0.01"


def test_long_labels_wrap_at_parts_then_spaces_and_keep_every_character():
    text = f"activation={LONG}, lr=0.01, model.depth=2"
    out = labels.wrap(text, 24)
    lines = out.split("\n")
    assert len(lines) > 1 and all(len(line) <= 24 for line in lines)
    assert "".join(out.split()) == "".join(text.split())  # only spaces at breaks go
    assert "lr=0.01, model.depth=2" in lines  # short parts stay together on one line
    assert labels.wrap("a" * 80, 30).split("\n") == ["a" * 29, "a" * 29, "a" * 22]  # a long token is cut


def test_commas_inside_calls_do_not_split_parts():
    assert labels._parts(f"activation={LONG}, lr=0.01") == [f"activation={LONG}", "lr=0.01"]
    assert labels.wrap("max(x, 0), lr=1", 12).split("\n")[0] == "max(x, 0),"


def test_keep_lines_keeps_the_baseline_and_the_best_in_order():
    names = [f"g{i}" for i in range(30)]
    ranks = {f"g{i}": 30 - i for i in range(30)}  # g29 is best
    kept, left = labels.keep_lines(names, ranks, always=["g0"], n=10)
    assert kept == ["g0", *[f"g{i}" for i in range(21, 30)]] and left == 20
    assert labels.keep_lines(names[:10], ranks, always=["g0"], n=10) == (names[:10], 0)


# ---------------------------------------------------------------------------------------------
# figures stay inside


def test_curves_with_long_labels_fit(tmp_path):
    csv = write_runs(tmp_path / "r.csv", ["relu", LONG, LONGER, "gelu"])
    fig = plots.curves_figure(cmp.load([csv]))  # lines: activation x lr, labels 'activation=..., lr=...'
    assert_inside(fig)
    legend = fig.legends[0]
    shown = [t.get_text() for t in legend.get_texts()]
    assert any("\n" in t for t in shown) and all(len(line) <= labels.WIDTH for t in shown for line in t.split("\n"))
    # and one panel per expression (--by activation): the panel titles wrap too
    assert_inside(plots.curves_figure(cmp.load([csv]), ["activation"]))


def test_sensitivity_with_long_labels_fits(tmp_path):
    csv = write_runs(tmp_path / "r.csv", ["relu", LONG, LONGER])
    fig = sensitivity.sensitivity_figure(cmp.load([csv]), "lr", Metric("final"), "train_loss")
    assert_inside(fig)
    assert "\n" in fig._suptitle.get_text() or fig._suptitle.get_window_extent(labels.renderer(fig)).width \
        <= fig.bbox.width


def test_a_long_title_wraps_to_the_figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3), layout="constrained")
    fig.add_subplot()
    text = "final of train_loss against lr: median over seeds, band = interquartile range; * = tuned choice"
    labels.suptitle(fig, text)
    assert "\n" in fig._suptitle.get_text()
    assert "".join(fig._suptitle.get_text().split()) == "".join(text.split())
    assert_inside(fig)


def test_activation_shapes_with_long_expressions_fit():
    fig = plots.activations_figure(["relu", LONG, LONGER])
    assert_inside(fig)


def test_gradient_panels_with_long_labels_fit(tmp_path):
    from activation_bench.render import grad_plots

    med = pd.DataFrame({"panel": [f"activation={LONGER}"] * 4, "layer": [1, 1, 2, 2], "epoch": [1, 2, 1, 2],
                        "weight_grad_norm": [1.0, 0.5, 2.0, 1.0]})
    captured = []

    def save(fig, output):
        captured.append(fig)
        return output

    orig = grad_plots.save_figure
    grad_plots.save_figure = save
    try:
        grad_plots._draw(med, pd.Series({f"activation={LONGER}": 3}), [f"activation={LONGER}"], ["activation"],
                         tmp_path / "g.png", "weight_grad_norm")
    finally:
        grad_plots.save_figure = orig
    assert_inside(captured[0])


# ---------------------------------------------------------------------------------------------
# too many curves


def test_thirty_groups_draw_the_baseline_and_the_best_nine(tmp_path):
    acts = [f"act{i:02d}" for i in range(29)] + ["relu"]  # relu is the worst and the last
    csv = write_runs(tmp_path / "r.csv", acts, lrs=("0.01",), seeds=3)
    fig = plots.curves_figure(cmp.load([csv]))
    drawn = [line.get_label() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    assert drawn == [f"act{i:02d}" for i in range(9)] + ["relu"]
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "10 of 30 groups drawn: the baseline (activation=relu) and the lowest by median" in title
    assert_inside(fig)
    # the sensitivity figure the same way (best median at the best lr), with two lrs
    csv = write_runs(tmp_path / "s.csv", acts, seeds=3)
    fig = sensitivity.sensitivity_figure(cmp.load([csv]), "lr", Metric("final"), "train_loss")
    drawn = [line.get_label() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    assert drawn == sorted([f"act{i:02d}" for i in range(9)] + ["relu"])
    assert_inside(fig)


def test_ten_groups_are_all_drawn(tmp_path):
    csv = write_runs(tmp_path / "r.csv", [f"act{i}" for i in range(10)], lrs=("0.01",), seeds=3)
    fig = plots.curves_figure(cmp.load([csv]))
    assert len([x for x in fig.axes[0].get_lines() if not x.get_label().startswith("_")]) == 10
    assert "drawn" not in fig._suptitle.get_text()


# ---------------------------------------------------------------------------------------------
# a tuned report's curves


def test_tuned_report_curves_show_each_group_at_its_chosen_value(tmp_path, monkeypatch):
    """relu's val_loss is lowest at lr=0.01, the expression's at 0.001: one curve each, from the
    evaluation seeds' runs at that value (their median), not a curve per lr."""
    csv = write_runs(tmp_path / "r.csv", ["relu", LONG], best={"relu": "0.01", LONG: "0.001"})
    loaded = cmp.load([csv])
    res = cmp.compare(loaded, "final", tune=TuneSpec(("lr",), 2))
    assert res.baseline == ("activation", "relu")
    figs = []
    monkeypatch.setattr(rep, "svg", lambda fig, prefix, tight=False: figs.append(fig) or "<svg></svg>")
    rep.curves(loaded, [], res)
    assert len(figs) == 2  # train_loss and val_loss
    raw = pd.read_csv(csv)
    for fig, column in zip(figs, ("train_loss", "val_loss")):
        lines = {x.get_label(): x for x in fig.axes[0].get_lines() if not x.get_label().startswith("_")}
        assert set(lines) == {"relu", LONG}
        for act, lr in (("relu", 0.01), (LONG, 0.001)):
            runs = raw[(raw.activation == act) & (raw.lr == lr) & (raw.seed >= 2) & (raw.epoch == 4)]
            assert lines[act].get_ydata()[-1] == pytest.approx(runs[column].median())
        assert_inside(fig)
    untuned = []
    monkeypatch.setattr(rep, "svg", lambda fig, prefix, tight=False: untuned.append(fig) or "<svg></svg>")
    rep.curves(loaded, [], cmp.compare(loaded, "final"))
    assert len([x for x in untuned[0].axes[0].get_lines() if not x.get_label().startswith("_")]) == 4  # 2 x 2 lrs


def test_tuned_report_page_says_so(tmp_path, monkeypatch):
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report.py draws)
    csv = write_runs(tmp_path / "r.csv", ["relu", LONG], best={"relu": "0.01", LONG: "0.001"})
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(csv), "-o", str(out), "--tune", "lr", "--tune-seeds", "2",
                                      "--no-shapes"])
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "each group at its chosen lr (early_stop), on the evaluation seeds (2, 3, 4, 5)" in html
