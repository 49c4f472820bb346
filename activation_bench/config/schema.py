"""The config schema: the dataclasses Hydra's ConfigStore checks composed configs against, and the
value sets the validation refers to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "cosine")  # the learning rate per step (engine/optim.py `Schedule`)
DEVICES = ("cpu", "cuda", "auto")
DTYPES = ("float32", "float64")
DISTRIBUTIONS = ("normal", "uniform")
TARGETS = ("random", "teacher")
ENGINES = ("eager", "compiled", "auto")  # engine/compiled/choose.py: eager, or its compiled step (auto: by size)
SPLICED = ("activation", "data", "model")  # groups whose options only set their own subtree (package = group)
# options that need user input (activation=custom a _target_, activation=expr an fn, model=module a
# target, data=csv a file, the image sources their files, data=text a file, data=shakespeare its file;
# the text sources also need a model with a window, model=transformer, so a glob over data with the
# default model leaves them out)
NOT_GLOBBED = {"custom", "expr", "csv", "mnist", "fashion_mnist", "cifar10", "text", "python_docs", "shakespeare",
               "module"}


@dataclass
class DataConfig:
    name: str = "normal"
    task: str = "regression"  # regression | classification (class labels: K outputs, cross-entropy, accuracy)
    n_samples: int | None = 10
    input_dim: int | None = 64
    mean: float | None = None
    std: float | None = None
    low: float | None = None
    high: float | None = None
    target: str | None = "random"  # random | teacher; a table's column for real data
    n_val: int = 0
    noise: float = 0.0
    teacher_activation: str = "relu"
    teacher_hidden_dim: int = 64
    # real tables and function tasks (activation_bench.datasets); null for normal/uniform
    path: str | None = None
    sha256: str | None = None
    features: list[str] | None = None
    fn: str | None = None
    val_fraction: float | None = None
    test_fraction: float | None = None
    standardize: bool | None = None
    dropna: bool | None = None
    # image files (data=mnist, fashion_mnist, cifar10): the folder in torchvision's layout (null: the
    # user cache directory), and a stratified subsample of the training images per seed (null: all)
    root: str | None = None
    n_train: int | None = None
    channels: int | None = None  # images, model=module: 3 repeats a single-channel image to 3 (null: the source's)
    # text (data=text, python_docs, shakespeare; data/text.py): optimiser steps per epoch; eval_windows N:
    # both held-out splits on N fixed windows after each epoch (null: the test split judged whole, the
    # validation split on val_windows fixed windows after each epoch); null for every other source
    steps: int | None = None
    eval_windows: int | None = None
    val_windows: int | None = None
    block_size: int | None = None  # text: the window length (null: model.block_size, the transformer's)


@dataclass
class LogConfig:
    grad_norms: bool = False  # write grads.csv: per layer, the weight-gradient and activation-output norms
    every: int = 10  # ... every this many epochs (and at epochs 1 and the last)
    train_eval: bool = False  # also log train_eval_loss: the training split's loss with dropout off (one more pass)
    preact_stats: int = 0  # K > 0: write preact.csv, how normal each layer's pre-activations are, every K epochs


@dataclass
class CheckpointConfig:
    """Mid-run checkpoints of a training stack (runs/checkpoint_files.py); not part of config_hash (they
    change no result). A signal (SIGTERM, SIGINT, SIGUSR2) writes one whatever these say."""

    seconds: float = 300.0  # write one every this many seconds of training (0: not by time)
    every: int = 0  # ... and/or every this many epochs (0: not by epochs)


@dataclass
class Config:
    activation: dict[str, Any] = field(default_factory=lambda: {"name": "gelu"})
    data: DataConfig = field(default_factory=DataConfig)
    # a model family's schema (engine/models/registry.py), chosen by the model group (model=mlp, the default)
    model: Any = None
    log: LogConfig = field(default_factory=LogConfig)
    epochs: int = 1000
    lr: float = 1e-3
    seed: int = 0
    batch_size: int | None = None
    shuffle: bool = False
    optimizer: str = "adam"
    weight_decay: float = 0.0  # adam: AdamW's decoupled weight decay of the matrices (0: plain Adam)
    beta2: float = 0.999  # adam: the second moment's decay
    momentum: float = 0.0  # sgd: heavy-ball momentum (0: plain SGD)
    nesterov: bool = False  # sgd: Nesterov momentum (needs momentum > 0)
    grad_clip: float = 0.0  # clip each member's own global gradient norm to this (0: off)
    schedule: str = "constant"  # constant | cosine (nanoGPT's: linear warmup, cosine decay to min_lr)
    warmup_steps: int = 0  # cosine: optimiser steps of linear warmup
    decay_steps: int | None = None  # cosine: the step the decay reaches min_lr (null: the run's total steps)
    min_lr: float = 0.0  # cosine: the learning rate after the decay
    device: str = "cpu"
    dtype: str = "float32"
    engine: str = "auto"  # auto (compiled where saved, or long) | eager | compiled (ahead of time: engine/compiled/)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


_registered = False


def _register_schema() -> None:
    global _registered
    if not _registered:
        from hydra.core.config_store import ConfigStore

        store = ConfigStore.instance()
        store.store(name="base_schema", node=Config)
        _registered = True
        from activation_bench.engine.models import registry

        registry.store_schemas()
        from activation_bench.data.shapes import register_resolver

        register_resolver()  # ${data:NAME} kept as written until validation fills it in (data/shapes.py)
