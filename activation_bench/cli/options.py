"""What the commands share on the command line: the override argument, --runs-dir, and the list of
config keys their help ends with. Light (pathlib and typer only), so `actbench --help` stays fast."""

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
MarginOpt = Annotated[str | None, typer.Option(
    "--margin", help="A region of practical equivalence, chosen before looking: a geometric-mean ratio on a loss "
    "(1.05: ratios within 1/1.05-1.05), percentage points on an accuracy (1: within +-1 pp). Each comparison "
    "with the baseline then reads better, worse, equivalent (its interval inside the margin) or undecided.",
    show_default=False)]
SequentialOpt = Annotated[bool, typer.Option(
    "--sequential", help="With --margin: read the verdicts from anytime-valid confidence sequences over the seeds "
    "in order (valid however often the seeds were looked at, as a sequential sweep does), with the seeds each "
    "used and why it stopped.")]
JudgeSeedsMaxOpt = Annotated[int | None, typer.Option(
    "--judge-seeds-max", help="With --sequential: the most judging seeds a comparison may use; an undecided one "
    "that used them reads 'max seeds' (else 'open': more seeds may decide it).", show_default=False)]
