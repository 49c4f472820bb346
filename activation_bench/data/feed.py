"""What the engine asks of a kind of data source (`Source`, registered in data/registry.py) and of
the data of one training stack (`Feed`). A Source loads a member's data (`load`), says whether the
model's outputs are class logits (`classifies`) and whether its data may load in two threads at once
(`thread_safe`), and gives each training stack its `Feed`: the members' training inputs on the
device, the random streams the batches draw from, each epoch's minibatches, and how the test split
is judged, after every epoch or once at the end (`judged_at_end`, `judge`).

The kinds of rows are here: `Synthetic` (normal, uniform: drawn from the seed) and `Split` (the
tables, the function tasks, MNIST-1D and the image sets: data/splits.py's split of each seed); text's
is data/text_feed.py.

Importing this module imports no torch: a Source's configuration side is arithmetic on the config,
its Feed imports torch when built (as a Family's build does).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

    from activation_bench.cfg import Cfg
    from activation_bench.data.synthetic import Dataset

Batch = tuple["torch.Tensor", "torch.Tensor"]
# synthetic data's target=teacher: a network's outputs [rows, 1] on inputs x, built by the engine
# (engine/teacher.py), which the data layer cannot import
Teacher = Callable[["Cfg", "torch.Tensor"], "torch.Tensor"]


def shuffles(cfg: Cfg) -> bool:
    """Whether each epoch's minibatch order is a fresh permutation (shuffle=true with minibatches)."""
    from activation_bench.data.shapes import data_shapes

    n = data_shapes(cfg)[0]
    return bool(cfg.shuffle) and (cfg.batch_size or n) < n


class Feed:
    """One training stack's data as the loop takes it (rows, the default): members first in every
    tensor, each member's own rows [M, N, ...] in fixed minibatches of `batch_size`, or with
    shuffling a permutation per epoch from each distinct seed's "shuffle" stream (members sharing a
    seed see the same order: paired). `gens` are the streams a checkpoint saves and restores
    (engine/resume.py); the test split, where there is one, is evaluated after every epoch."""

    judged_at_end = False  # True: the test split is judged once, at the end (`judge`), not after each epoch

    def __init__(self, cfg: Cfg, data: Sequence[Dataset], seeds: list[int], device: str) -> None:
        from activation_bench.data.shapes import data_shapes

        n, n_val, n_test, _ = data_shapes(cfg)
        self.seeds, self.device = seeds, device
        self.batch_size = cfg.batch_size or n
        self.x, self.y = self.inputs(data), _stacked(data, "y", device)
        self.val = (_stacked(data, "x_val", device), _stacked(data, "y_val", device)) if n_val else None
        self.test = (_stacked(data, "x_test", device), _stacked(data, "y_test", device)) if n_test else None
        self.gens = self.streams(cfg)

    def inputs(self, data: Sequence[Dataset]) -> torch.Tensor:
        """The members' training inputs [M, N, ...] on the device."""
        return _stacked(data, "x", self.device)

    def streams(self, cfg: Cfg) -> dict[int, torch.Generator]:
        """Each distinct seed's generator of its batch order (none: the order is fixed)."""
        from activation_bench.data.synthetic import generator

        return {s: generator(s, "shuffle") for s in set(self.seeds)} if shuffles(cfg) else {}

    def batches(self) -> list[Batch]:
        """This epoch's minibatches [(x [M, b, ...], y [M, b, ...])]."""
        if not self.gens:
            return self.fixed_batches
        import torch

        n = self.x.shape[1]
        perms = {s: torch.randperm(n, generator=g) for s, g in self.gens.items()}
        idx = torch.stack([perms[s] for s in self.seeds]).to(self.device)
        return _split(_take_rows(self.x, idx), _take_rows(self.y, idx), self.batch_size)

    @functools.cached_property
    def fixed_batches(self) -> list[Batch]:
        """The minibatches in the rows' own order (a compiled step is traced on them)."""
        return _split(self.x, self.y, self.batch_size)

    def judge(self, predict: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
              y: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
        """With `judged_at_end`: each member's loss and accuracy per item of the test split [M, items]
        (float64), the model's `predict` at the weights being judged; the split's score is each row's mean."""
        raise NotImplementedError


def _stacked(data: Sequence[Dataset], attr: str, device: str) -> torch.Tensor:
    import torch

    return torch.stack([getattr(d, attr) for d in data]).to(device)


def _take_rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """t[m, idx[m]] for every member m: t [M, N, ...], idx [M, N] -> [M, N, ...] (a copy, exact).
    One index_select of whole rows on the flattened tensor: the equivalent `gather` with an
    expanded index took 30-38 ms against 7-8 ms for MNIST-1D's 60 x 3,200 x 40 training set (a
    tenth of a classification epoch)."""
    import torch

    m, n = idx.shape
    flat = (idx + torch.arange(m, device=idx.device)[:, None] * t.shape[1]).flatten()
    return t.reshape(m * t.shape[1], *t.shape[2:]).index_select(0, flat).view(m, n, *t.shape[2:])


def _split(x: torch.Tensor, y: torch.Tensor, bs: int) -> list[Batch]:
    return [(x[:, i : i + bs], y[:, i : i + bs]) for i in range(0, x.shape[1], bs)]


class Source:
    """What the engine asks of a kind of data source. Subclasses set `name` and `serves` and override
    what differs; the defaults suit a source of rows."""

    name: str = ""

    def serves(self, data: Cfg) -> bool:
        """Whether this kind loads the data config (its data.name)."""
        raise NotImplementedError

    def load(self, cfg: Cfg, teacher: Teacher) -> Dataset:
        """The member's data (each source caches what its members share, per process)."""
        raise NotImplementedError

    def classifies(self, cfg: Cfg) -> bool:
        """Whether the model's outputs are class logits (cross-entropy and accuracy), else a regressor's."""
        from activation_bench.data import tables

        return tables.is_classification(cfg.data)

    def thread_safe(self, data: Cfg) -> bool:
        """Whether two stacks may load this data at once, in two threads (runs/beside.py)."""
        return True

    def feed(self, cfg: Cfg, data: Sequence[Dataset], seeds: list[int], device: str) -> Feed:
        """A stack's feed: `data` and `seeds` its members' in stack order, `cfg` its first member's."""
        return Feed(cfg, data, seeds, device)


class Synthetic(Source):
    """Inputs drawn from a distribution of the seed, random or a teacher network's targets (data/synthetic.py)."""

    name = "synthetic"

    def serves(self, data: Cfg) -> bool:
        return data.name in ("normal", "uniform")

    def load(self, cfg: Cfg, teacher: Teacher) -> Dataset:
        from activation_bench.data.synthetic import make_dataset

        return make_dataset(cfg, teacher)


class Split(Source):
    """A seed's train / validation / test split of a table, a function task, MNIST-1D or an image set
    (data/splits.py, cached per process and seed)."""

    name = "split"

    def serves(self, data: Cfg) -> bool:
        from activation_bench.data import tables

        return tables.is_real(data)

    def load(self, cfg: Cfg, teacher: Teacher) -> Dataset:
        from activation_bench.data import splits

        return splits.make_dataset(cfg)

    def thread_safe(self, data: Cfg) -> bool:
        from activation_bench.data import tables

        return data.name in tables.THREAD_SAFE  # not the image files or MNIST-1D's generation
