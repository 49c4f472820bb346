"""actbench plot / plot-activations: tiny data, files written (png, svg), bad input exits 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.cli.main import app
from activation_bench.errors import UsageError
from activation_bench.render import plots


@pytest.fixture
def curves_csv(tmp_path: Path) -> Path:
    rows = []
    rng = np.random.default_rng(0)
    for act in ("relu", "gelu"):
        for data in ("normal", "uniform"):
            for seed in range(3):
                rate = rng.uniform(0.5, 1.5)
                for e in range(1, 9):
                    loss = max(np.exp(-rate * e * 4), 1e-14)
                    rows.append({"activation": act, "data": data, "seed": seed, "epoch": e, "train_loss": loss})
    # one diverged run
    rows.append({"activation": "relu", "data": "normal", "seed": 9, "epoch": 1, "train_loss": float("nan")})
    path = tmp_path / "curves.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_plot_curves_writes_file(tmp_path, curves_csv, ext):
    out = tmp_path / f"curves.{ext}"
    result = CliRunner().invoke(app, ["plot", str(curves_csv), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_curve_layout_and_stats(curves_csv):
    loaded = cmp.load([curves_csv])
    panels, lines = plots.curve_layout(loaded, None)
    assert panels == ["data"] and lines == ["activation"]
    df, n_div = plots.curve_stats(loaded, panels, lines, "train_loss")
    assert n_div == 1
    sub = df[(df["panel"] == "normal") & (df["line"] == "relu") & (df["epoch"] == 2)]
    raw = pd.read_csv(curves_csv)
    x = raw[(raw.activation == "relu") & (raw.data == "normal") & (raw.epoch == 2) & (raw.seed < 9)]["train_loss"]
    assert sub["q50"].iloc[0] == pytest.approx(np.maximum(x, 1e-13).median())
    assert sub["n"].iloc[0] == 3
    assert plots.curve_layout(loaded, ["activation"]) == (["activation"], ["data"])


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_plot_activations_writes_file(tmp_path, ext):
    out = tmp_path / f"acts.{ext}"
    result = CliRunner().invoke(app, ["plot-activations", "gelu", "relu", "gelu_tanh", "--pdf",
                                        "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000


def test_activation_derivatives_are_right():
    x, curves = plots.activation_curves(["relu", "silu"], -2.0, 2.0, points=41)
    y, dy = curves["silu"]
    s = 1 / (1 + np.exp(-x))
    assert y == pytest.approx(x * s)
    assert dy == pytest.approx(s * (1 + x * (1 - s)))
    assert curves["relu"][1][x > 0] == pytest.approx(1.0)


def test_activation_parameters_are_applied():
    x, curves = plots.activation_curves(["leaky_relu", "leaky_relu:negative_slope=0.2", "softplus:beta=2,threshold=10"],
                                        -2.0, 2.0, points=41)
    assert list(curves) == ["leaky_relu", "leaky_relu (negative_slope=0.2)", "softplus (beta=2, threshold=10)"]
    y, dy = curves["leaky_relu (negative_slope=0.2)"]
    assert y == pytest.approx(np.where(x >= 0, x, 0.2 * x))
    assert dy[x < 0] == pytest.approx(0.2)
    assert curves["leaky_relu"][1][x < 0] == pytest.approx(0.01)
    y, dy = curves["softplus (beta=2, threshold=10)"]
    assert y == pytest.approx(np.log1p(np.exp(2 * x)) / 2)
    assert dy == pytest.approx(1 / (1 + np.exp(-2 * x)))


def test_plot_activations_with_parameters_writes_file(tmp_path):
    out = tmp_path / "acts.png"
    result = CliRunner().invoke(app, ["plot-activations", "elu", "elu:alpha=0.5", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000


@pytest.mark.parametrize(("args", "message"), [
    (["plot-activations", "swiglu", "--output", "{tmp}/a.png"], "gated"),
    (["plot-activations", "leaky_relu:slope=0.2", "--output", "{tmp}/a.png"], "unknown parameter 'slope'"),
    (["plot-activations", "leaky_relu:negative_slope", "--output", "{tmp}/a.png"], "parameters are key=value"),
    (["plot-activations", "leaky_relu:negative_slope=abc", "--output", "{tmp}/a.png"], "must be a float"),
    (["plot-activations", "softplus:beta=0", "--output", "{tmp}/a.png"], "beta must be > 0"),
    (["plot-activations", "nosuch", "--output", "{tmp}/a.png"], "unknown activation 'nosuch'"),
    (["plot-activations", "gelu", "--output", "{tmp}/a.jpg"], "unknown image type '.jpg'"),
    (["plot-activations", "gelu", "--xmin", "3", "--xmax", "1", "--output", "{tmp}/a.png"], "invalid range"),
    (["plot", "{csv}", "--output", "{tmp}/c.txt"], "unknown image type"),
    (["plot", "{csv}", "--output", "{tmp}/nodir/c.png"], "does not exist"),
    (["plot", "{tmp}/nosuch.csv", "--output", "{tmp}/c.png"], "no such file"),
    (["plot", "{csv}", "--by", "nosuch", "--output", "{tmp}/c.png"], "no such config column"),
])
def test_bad_input_exit_2(tmp_path, curves_csv, args, message):
    args = [a.format(tmp=tmp_path, csv=curves_csv) for a in args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not list(tmp_path.glob("a.*")) and not list(tmp_path.glob("c.*"))


def test_save_figure_refuses_unknown_extension(tmp_path):
    with pytest.raises(UsageError):
        plots.check_output(tmp_path / "x.bmp")


def test_a_log_axis_over_many_decades_leaves_out_minor_ticks_and_a_narrow_one_keeps_them() -> None:
    """Minor ticks on a wide log axis were half the time of drawing a 12-panel figure; over a
    narrow span they carry the axis's labels (no decade may fall inside it), so they stay."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    fig = Figure()
    wide, narrow, xs = fig.subplots(1, 3)
    for ax in (wide, narrow, xs):
        ax.plot([1, 2, 3], [0.2, 0.5, 0.9])
    plots.log_scale(wide, "y", [1e-6, 1.0, 0.0, float("nan")])  # zeros and NaN are not on a log axis
    plots.log_scale(narrow, "y", np.array([[0.2, 0.3], [0.5, 0.9]]))
    plots.log_scale(xs, "x", [1e-5, 1e-1])
    assert wide.get_yscale() == narrow.get_yscale() == xs.get_xscale() == "log"
    assert isinstance(wide.yaxis.get_minor_locator(), NullLocator)
    assert isinstance(xs.xaxis.get_minor_locator(), NullLocator)
    assert not isinstance(narrow.yaxis.get_minor_locator(), NullLocator)
    FigureCanvasAgg(fig).draw()
    assert any(t.get_text() for t in narrow.yaxis.get_ticklabels(minor=True))  # 0.2 ... 0.9 labelled
