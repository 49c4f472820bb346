"""How a text source feeds a training stack (data/feed.py's `Source` for data/text.py's sources).

One copy of the training tokens serves every member; each epoch is `data.steps` batches of random
windows of the window length, drawn from each seed's "batches" stream (nanoGPT's get_batch: members
sharing a seed see the same windows, paired). By default (data.eval_windows null) the test split is
judged whole, once at the end (`Windows.judge`; the engine evaluates it at each member's epoch of
lowest validation loss and at its last, engine/whole_split.py): every non-overlapping window,
`text.CHUNK` windows per pass, each window's mean cross-entropy and accuracy. Every operation is per
member and per window (the windows pass in the same chunks in any stack), so a member's numbers are
the same in any stack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from activation_bench.data import text
from activation_bench.data.feed import Batch, Feed, Source, Teacher

if TYPE_CHECKING:
    import numpy as np
    import torch

    from activation_bench.cfg import Cfg
    from activation_bench.data.synthetic import Dataset


class Windows(Feed):
    """A text stack's feed: the tokens [M, L] (rows sharing one copy), `steps` batches a epoch of
    `block`-token windows."""

    def __init__(self, cfg: Cfg, data: Sequence[Dataset], seeds: list[int], device: str) -> None:
        self.steps, self.block = int(cfg.data.steps), int(text.block_size(cfg))
        self.judged_at_end = text.judges_whole(cfg.data)
        super().__init__(cfg, data, seeds, device)

    def inputs(self, data: Sequence[Dataset]) -> torch.Tensor:
        return data[0].x.to(self.device)[None].expand(len(data), -1)  # one copy serves every member

    def streams(self, cfg: Cfg) -> dict[int, torch.Generator]:
        from activation_bench.data.synthetic import generator

        return {s: generator(s, "batches") for s in dict.fromkeys(self.seeds)}

    def batches(self) -> list[Batch]:
        """This epoch's batches [(x [M, batch, block], y)] of the members from each distinct seed's generator."""
        import torch

        distinct = list(self.gens)
        which = torch.tensor([distinct.index(s) for s in self.seeds], device=self.device)
        tokens = self.x[:1].expand(len(distinct), -1)
        out = []
        for _ in range(self.steps):
            xs, ys = text.sample(tokens, [self.gens[s] for s in distinct], self.block, self.batch_size)
            out.append((xs.index_select(0, which), ys.index_select(0, which)))
        return out

    def judge(self, predict: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
              y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        return per_window(predict, x, y)


def per_window(predict: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
               y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Each member's mean cross-entropy and accuracy per window [M, W] (float64 arrays of the float32
    values): x, y [M, W, T], passed through `predict` (logits [M, b, T, V]) text.CHUNK windows at a time."""
    import torch

    losses, accs = [], []
    with torch.no_grad():
        for xs, ys in zip(x.split(text.CHUNK, dim=1), y.split(text.CHUNK, dim=1)):
            logits = predict(xs)
            nll = logits.log_softmax(dim=-1).gather(-1, ys[..., None]).squeeze(-1).neg()
            losses.append(nll.mean(dim=-1).cpu())
            accs.append((logits.argmax(dim=-1) == ys).to(logits.dtype).mean(dim=-1).cpu())
    return torch.cat(losses, dim=1).double().numpy(), torch.cat(accs, dim=1).double().numpy()


class Text(Source):
    """Next-character prediction on a text (data/text.py's TEXT sources)."""

    name = "text"

    def serves(self, data: Cfg) -> bool:
        return text.is_text(data)

    def load(self, cfg: Cfg, teacher: Teacher) -> Dataset:
        return text.make_dataset(cfg)

    def classifies(self, cfg: Cfg) -> bool:
        return True  # logits over the characters

    def feed(self, cfg: Cfg, data: Sequence[Dataset], seeds: list[int], device: str) -> Windows:
        return Windows(cfg, data, seeds, device)
