"""Typer command `plot-activations` (registered in cli/main.py): activations and their derivatives.

torch (autograd) and matplotlib are imported inside the command. The options are declared in
cli/options.py.
"""

from __future__ import annotations

import typer

from activation_bench.cli.options import ActivationNamesArg, ImageOpt, PdfOpt, XmaxOpt, XminOpt
from activation_bench.errors import reported


def plot_activations(
    names: ActivationNamesArg,
    output: ImageOpt,
    xmin: XminOpt = -4.0,
    xmax: XmaxOpt = 4.0,
    pdf: PdfOpt = False,
) -> None:
    """Each activation and its derivative (autograd, float64) over a range, in two panels.

    Examples:

      actbench plot-activations gelu relu gelu_tanh --output acts.png

      actbench plot-activations gelu silu mish --xmin -6 --xmax 3 --pdf --output acts.svg

      actbench plot-activations leaky_relu leaky_relu:negative_slope=0.2 elu:alpha=0.5 -o acts.png

      actbench plot-activations silu "x*sigmoid(1.702*x)" "x*sigmoid(beta*x):beta=2" -o acts.png
    """
    with reported():
        from activation_bench.render import plots

        plots.plot_activations(names, output, (xmin, xmax), pdf)
        typer.echo(f"wrote {output}", err=True)
