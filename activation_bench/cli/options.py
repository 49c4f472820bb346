"""The command line's options in one place: the override argument, --runs-dir and the list of config
keys the training commands' help ends with; the inputs, grouping, tuning, output and verdict options
that compare, rank, plot and report share; and each of those commands' own options. Light (pathlib
and typer only), so `actbench --help` stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from activation_bench.config import files
from activation_bench.errors import UsageError


def group_help(group: str) -> str:
    """A group's options for the help text ('' if the configs folder cannot be found)."""
    try:
        return ", ".join(files.listing(str(files.config_dir()), group))
    except (UsageError, OSError):
        return ""


KEYS_HELP = f"""
Config keys (Hydra overrides, KEY=VALUE):\n
  activation=NAME       {group_help("activation")}\n
  activation.PARAM=V    the activation's parameters (see `actbench activations`)\n
  data=NAME             {group_help("data")}\n
  data.n_samples=10     training examples; data.input_dim=64 input features\n
  data.mean/std         normal data (0, 1); data.low/high uniform data (-1, 1)\n
  data.target=random    random | teacher (targets from a seeded random network);\n
                        data.n_val, data.noise, data.teacher_activation, data.teacher_hidden_dim\n
  data=diabetes|star98|randhie  real regression tables bundled with scikit-learn / statsmodels\n
  data=digits|wine|breast_cancer|iris|mnist1d  class tables (K outputs, cross-entropy, accuracy)\n
  data=mnist|fashion_mnist|cifar10 [data.root=DIR]  image files (torchvision's layout); data.n_train=N subsample\n
  data=csv data.path=FILE data.target=COLUMN [data.features=[a,b]]  your own table\n
                        data.task=classification for class labels (strings or integers)\n
  data=function data.fn=exp_sin  function fitting (xy, bessel_j0, exp_sin4, ellipkinc, ...)\n
  data.val_fraction=0.2 data.test_fraction=0.2 data.standardize=true data.dropna=false  (real data)\n
  model=mlp|cnn|transformer  the model family (cnn: convolution blocks on sequences and images;\n
                        transformer: a small GPT on text data)\n
  model.hidden_dim=64   hidden width; model.depth=1 hidden layers (model=mlp)\n
  model.dropout=0       dropout after every hidden activation (training only); log.train_eval=false\n
                        also logs train_eval_loss, the training loss with dropout off\n
  model.init=torch_default   torch_default | he | lecun | xavier | auto (the activation's recommendation)\n
  model.norm=none       none | batch | layer, between each hidden Linear and its activation;\n
                        model.residual=false  true: h + f(h) from the second hidden layer\n
  model=cnn model.channels=[25,25,25] model.kernel=[5,3,3] model.stride=[2,2,2] model.padding=[1,1,1]\n
                        model.pool=none|max|avg model.pool_size=2 model.global_pool=false model.norm=none|batch\n
  model=module model.target=MOD:ATTR  your own nn.Module (docs/your-own-model.md)\n
                        model.act_arg=NAME or model.replace=[torch.nn.ReLU]; +model.kwargs.NAME=VALUE\n
                        '+model.kwargs.num_classes=${{data:classes}}': the data's sizes (features, ...)\n
                        data.channels=3: a gray image repeated to 3 channels\n
  log.preact_stats=0    K: write preact.csv (how normal each layer's pre-activations are) every K epochs\n
  log.grad_norms=false  write grads.csv every log.every=10 epochs\n
  epochs=1000  lr=0.001  seed=0  batch_size=null (whole set)  shuffle=false  optimizer=adam|sgd\n
  device=cpu|cuda|auto  dtype=float32|float64  engine=auto|eager|compiled (auto: compiled where saved here)\n
  experiment=NAME       a preset ({group_help("experiment") or "none"})
"""

OverridesArg = Annotated[
    list[str] | None,
    typer.Argument(help="Hydra overrides KEY=VALUE (see the key list below).", show_default=False),
]
RunsDirOpt = Annotated[Path, typer.Option("--runs-dir", help="Root directory for results.")]

# ---------------------------------------------------------------------------------------------
# reading results: compare, rank, plot, report

PathsArg = Annotated[
    list[Path],
    typer.Argument(help="Sweep directories, run directories, results.csv / losses.csv files or any long-format "
                   "CSV (epoch, train_loss, config columns).", show_default=False),
]
ByOpt = Annotated[
    list[str] | None,
    typer.Option("--by", help="Group by these config columns (repeat or comma list). Default: every config "
                 "column that varies across the inputs, except seed.", show_default=False),
]
TuneOpt = Annotated[
    list[str] | None,
    typer.Option("--tune", help="Tune this swept key (repeat: lr, batch_size, model.init, ...): each group at its "
                 "own best value, chosen by the metric of val_loss (mean log10; --tune-on val_acc: of val_acc, "
                 "highest) on the tuning seeds; every statistic on the other seeds only.", show_default=False),
]
TuneSeedsOpt = Annotated[
    int | None,
    typer.Option("--tune-seeds", help="With --tune: the K smallest seeds tune, the rest are judged. Default: where "
                 "some seeds hold the grid and the others one value per group (a search's judgement), the seeds with "
                 "the grid; else a third of the seeds, rounded up, at least 2.", show_default=False),
]
TuneOnOpt = Annotated[
    str | None,
    typer.Option("--tune-on", help="With --tune: select on val_loss (default: lowest mean log10) or val_acc "
                 "(classification runs: highest mean accuracy).", show_default=False),
]
TuneGridOpt = Annotated[
    str | None,
    typer.Option("--tune-grid", help="With --tune: shared (default: every group over the same values; a group "
                 "lacking one is left out) or own (each group over the values its own runs have, e.g. a longer "
                 "budget re-training each group's earlier choice and its neighbours).", show_default=False),
]
CompareLossOpt = Annotated[str | None, typer.Option(
    "--loss", help="The compared column: a loss (train_loss, train_eval_loss, val_loss, test_loss; lower is "
    "better, log10 scale) or an accuracy of classification runs (val_acc, test_acc; higher is better, "
    "differences in percentage points). Default: train_loss; for --metric early_stop test_loss where the "
    "inputs have it.", show_default=False)]
BaselineOpt = Annotated[str | None, typer.Option(
    "--baseline", help="KEY=VALUE of the group the others are compared to, paired by seed. Default: the one a "
    "sequentially judged sweep was judged against (its judging.json), else activation=relu where the runs have it, "
    "else the first value of the first group column.", show_default=False)]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, csv, markdown or json.")]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.",
                                                show_default=False)]

# compare
MetricOpt = Annotated[str, typer.Option(
    "--metric", "-m", help="final (last epoch), best, epoch=K (loss at epoch K), "
    "to=EPS (first epoch with loss <= EPS), auc (mean log10 loss over epochs), early_stop (the loss at "
    "each run's epoch of lowest val_loss, earliest on ties: held-out test loss after early stopping).")]
PowerOpt = Annotated[str | None, typer.Option(
    "--power", help="RATIO, e.g. 1.05: per comparison, the seeds needed to detect a geometric-mean ratio of "
    "RATIO (paired t-test, from the observed spread) and the smallest ratio detectable with the current seeds. "
    "On an accuracy column (--loss val_acc/test_acc) a difference in percentage points, e.g. 1.",
    show_default=False)]
PowerLevelOpt = Annotated[str, typer.Option("--power-level", help="Power for --power.")]
CompareAlphaOpt = Annotated[str, typer.Option(
    "--alpha", help="Two-sided significance level for --power; with --margin the error rate of all verdicts "
    "together.")]
PairByOpt = Annotated[list[str] | None, typer.Option(
    "--pair-by", help="Pair each run with the baseline run that shares these columns (repeat or comma list; "
    "default: seed and every other varying column). --pair-by seed where each group trains at its own "
    "recipe (learning rate, warmup) chosen elsewhere.", show_default=False)]
MarginOpt = Annotated[str | None, typer.Option(
    "--margin", help="A region of practical equivalence, chosen before looking: a geometric-mean ratio on a loss "
    "(1.05: ratios within 1/1.05-1.05), percentage points on an accuracy (1: within +-1 pp). Each comparison "
    "with the baseline then reads better, worse, equivalent (its interval inside the margin) or undecided.",
    show_default=False)]
SequentialOpt = Annotated[bool, typer.Option(
    "--sequential", help="With --margin: read the verdicts from anytime-valid confidence sequences over the seeds "
    "in order (valid however often the seeds were looked at, as a sequential sweep does), with the seeds each "
    "used and why it stopped. Automatic on a sweep folder that recorded sequential judging (judging.json).")]
JudgeSeedsMaxOpt = Annotated[int | None, typer.Option(
    "--judge-seeds-max", help="With --sequential: the most judging seeds a comparison may use; an undecided one "
    "that used them reads 'max seeds' (else 'open': more seeds may decide it).", show_default=False)]

# rank
RankMetricOpt = Annotated[str, typer.Option(
    "--metric", "-m", help="final, best, epoch=K, to=EPS, auc or early_stop (as in compare).")]
RankByOpt = Annotated[str, typer.Option("--by", help="The config column whose values are ranked.")]
TaskOpt = Annotated[list[str] | None, typer.Option(
    "--task", help="Config columns that define a task (repeat or comma list). Default: every varying "
    "config column except --by and seed.", show_default=False)]
PosthocOpt = Annotated[str, typer.Option(
    "--posthoc", help="Test that decides the groups that cannot be told apart: nemenyi (mean ranks) or "
    "wilcoxon (signed-rank over tasks, Holm-corrected).")]
RankAlphaOpt = Annotated[str, typer.Option("--alpha", help="Significance level of the post-hoc tests.")]
CdPlotOpt = Annotated[Path | None, typer.Option(
    "--plot", help="Write the critical-difference diagram here (.png, .svg or .pdf).", show_default=False)]

# plot, plot-activations
ImageOpt = Annotated[Path, typer.Option("--output", "-o", help="Image file: .png, .svg or .pdf.", show_default=False)]
PlotLossOpt = Annotated[str, typer.Option(
    "--loss", help="Column: train_loss, val_loss or test_loss; for classification runs val_acc or test_acc (in %, "
    "linear axis); with --grads weight_grad_norm (default) or act_norm.", show_default=False)]
GradsOpt = Annotated[bool, typer.Option(
    "--grads", help="Per-layer gradient norms (grads.csv, from log.grad_norms=true) of run or sweep directories "
    "instead of losses: a panel per group, a line per hidden layer, median over seeds.")]
XOpt = Annotated[str | None, typer.Option(
    "--x", help="Sensitivity: the metric against this swept key (e.g. lr) on a log axis, a line per activation "
    "(or --by), a panel per task.", show_default=False)]
PlotMetricOpt = Annotated[str | None, typer.Option(
    "--metric", "-m", help="With --x: the metric drawn; with --tune: the metric the values are chosen by (as in "
    "compare). Default: early_stop where the runs have val_loss, else final.", show_default=False)]
ActivationNamesArg = Annotated[list[str], typer.Argument(
    help="Activation names (see `actbench activations`), each with optional parameters: "
    "leaky_relu:negative_slope=0.2 or softplus:beta=2,threshold=10, or expressions of x as activation=expr takes "
    "them: 'x*sigmoid(beta*x):beta=1.5'. Gated ones (glu, swiglu, ...) are not elementwise.", show_default=False)]
XminOpt = Annotated[float, typer.Option("--xmin", help="Left end of the x range.")]
XmaxOpt = Annotated[float, typer.Option("--xmax", help="Right end of the x range.")]
PdfOpt = Annotated[bool, typer.Option("--pdf/--no-pdf", help="Also draw the standard normal pdf.")]

# report
ReportOutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", help="The HTML file. Default: report.html inside the first input directory.",
    show_default=False)]
ReportMetricOpt = Annotated[list[str] | None, typer.Option(
    "--metric", "-m", help="A compare table per metric (repeat): final, best, epoch=K, to=EPS, auc. "
    "Default: final (and early_stop where validation losses exist and compare has it).", show_default=False)]
ReportBaselineOpt = Annotated[str | None, typer.Option(
    "--baseline", help="KEY=VALUE of the group the others are compared to, as in compare.", show_default=False)]
TitleOpt = Annotated[str | None, typer.Option("--title", help="The page's title.", show_default=False)]
ShapesOpt = Annotated[bool, typer.Option(
    "--shapes/--no-shapes", help="Draw the activations and their derivatives (the only section that imports "
    "torch).")]
ReportMarginOpt = Annotated[list[str] | None, typer.Option(
    "--margin", help="A region of practical equivalence (repeat for both kinds of table): a ratio for the loss "
    "tables (1.05), percentage points with 'pp' for the accuracy tables (1pp); each comparison then reads "
    "better, worse, equivalent or undecided, as compare --margin.", show_default=False)]
