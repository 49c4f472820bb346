"""Text, character by character, for next-character prediction (data.task=language_model), as nanoGPT's
data/shakespeare_char/prepare.py and train.py's get_batch make it.

Sources (`TEXT`):

- `text`: the user's UTF-8 file (`data.path`: resolved against the directory the command started in
  and saved with `data.sha256`, the SHA-256 of its bytes, as data=csv's file is);
- `python_docs`: Python's own documentation, which ships with the interpreter: the values of
  `pydoc_data.topics.topics` (a dict of topic -> text) joined in sorted key order with "\\n",
  ``"\\n".join(topics[k] for k in sorted(topics))`` (about 465K characters on Python 3.11; it changes
  with the interpreter's version, which the source line names). Nothing to download;
- `shakespeare`: tiny shakespeare, `<data.root>/shakespeare_char/input.txt` (nanoGPT's data/ layout:
  data.root=~/nanoGPT/data reads a nanoGPT clone's copy; null: the user cache directory,
  cache.cache_dir()), 1,115,394 characters, its SHA-256 checked against the configured data.sha256.

The vocabulary is the sorted set of the whole file's characters (prepare.py's), the tokens int64
indices into it. The first 90% of the characters train (prepare.py's `int(n * 0.9)`); the rest is cut
in two halves, validation then test (the test half gets the odd character). nanoGPT validates on the
whole last 10% and has no test split.

The window length is `data.block_size` (null: `model.block_size`, the transformer's; `block_size`);
`batch_size` is the number of windows per member and step,
`data.steps` the steps per epoch. Training windows are drawn at random (`sample`, nanoGPT's
get_batch). Held-out splits, the same windows for every seed and member (nanoGPT's estimate_loss draws
random batches: noise a paired comparison does not need):

- by default (`data.eval_windows` null) the validation split is estimated after every epoch on
  `data.val_windows` fixed windows at evenly spaced offsets (the early-stopping signal), and the test
  split is judged whole (`whole_windows`): every non-overlapping window of block_size characters,
  window i reading characters i*B .. i*B+B-1 of the split and scoring their next characters
  i*B+1 .. i*B+B, so characters 1 .. W*B are scored, W = (n - 1) // B (all but the first and the last
  (n - 1) mod B); the engine evaluates it once at the end, at each member's epoch of lowest
  validation loss and at its last epoch (data/text_feed.py, engine/whole_split.py);
- `data.eval_windows=N` (how runs before the whole-split test were made, kept so they reproduce):
  both splits on N fixed evenly spaced windows after every epoch; `data.val_windows` does not apply.

The corpus is read, checked and encoded once per process per file (path, size, mtime). Everything
but `make_dataset` and `sample` is torch-free.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from activation_bench.errors import UsageError

if TYPE_CHECKING:
    import torch

    from activation_bench.cfg import Cfg
    from activation_bench.data.synthetic import Dataset

TEXT = ("text", "python_docs", "shakespeare")
TASK = "language_model"  # data.task of every text source: next-character prediction
TRAIN_FRACTION = 0.9  # nanoGPT's
SHAKESPEARE_FILE = Path("shakespeare_char") / "input.txt"  # under data.root, as in nanoGPT's data/
SHAKESPEARE_CHARACTERS = 1_115_394
CHUNK = 64  # windows per evaluation pass (a whole split's, data/text_feed.py, and the sampled windows')
# the keys of other sources, which text leaves null
OTHER_KEYS = ("n_samples", "input_dim", "mean", "std", "low", "high", "target", "features", "fn", "val_fraction",
              "test_fraction", "standardize", "dropna", "n_train")
TEXT_KEYS = ("steps", "eval_windows", "val_windows", "block_size")  # text only; null for every other source


def is_text(data: Cfg) -> bool:
    """Whether the data config is a text source (`TEXT`)."""
    return data.name in TEXT


@dataclass(frozen=True)
class Corpus:
    """A text encoded character by character."""

    tokens: np.ndarray  # [characters] int64 indices into vocab
    vocab: str  # the sorted distinct characters
    source: str  # one line: where the text comes from
    sha256: str | None  # of the file's bytes (None: python_docs)


# ---------------------------------------------------------------------------------------------
# reading


def _encode(text: str, source: str, sha256: str | None) -> Corpus:
    """The sorted set of characters as the vocabulary and each character's index in it (sorting code
    points is sorting Python's strings: prepare.py's `sorted(list(set(data)))`)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    vocab = np.unique(codes)
    tokens = np.searchsorted(vocab, codes).astype(np.int64)
    return Corpus(tokens, "".join(map(chr, vocab.tolist())), source, sha256)


@functools.lru_cache(maxsize=8)
def _read(name: str, path: str | None, size: int, mtime_ns: int) -> Corpus:
    """Read, check and encode once per process per file (size and mtime: a changed file is read again)."""
    if name == "python_docs":
        from pydoc_data.topics import topics

        text = "\n".join(topics[k] for k in sorted(topics))
        version = sys.version.split()[0]
        return _encode(text, f"Python {version} documentation: pydoc_data.topics.topics, {len(topics)} topics "
                             "joined in sorted key order with newlines", None)
    from activation_bench.data.sources import file_sha256

    where = source_label(name, path)
    raw = Path(path or "").read_bytes()
    if not raw:
        raise UsageError(f"{where}: empty file, no text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{where}: not UTF-8 text: byte {exc.start} (0x{raw[exc.start]:02x}, line {line}) "
                         f"{exc.reason}") from None
    what = "tiny shakespeare" if name == "shakespeare" else "file"
    return _encode(text, f"{what} {path}", file_sha256(Path(path or "")))


def source_label(name: str, path: str | None) -> str:
    """How a one-line error names a text source's file: `data.path FILE` or `data=NAME FILE`."""
    return f"data.path {path}" if name == "text" else f"data={name} {path}"


def source_file(d: Cfg) -> Path | None:
    """The file a text source reads (None: python_docs), absolute."""
    if d.name == "python_docs":
        return None
    if d.name == "text":
        if not d.get("path"):
            raise UsageError("data=text needs data.path=FILE (a UTF-8 text file)")
        return Path(os.path.abspath(os.path.expanduser(str(d.path))))
    from activation_bench.data.images import root_dir

    return Path(os.path.abspath(root_dir(d.get("root")) / SHAKESPEARE_FILE))


def corpus(d: Cfg) -> Corpus:
    """The encoded text of a data config (read once per process per file); UsageError for a missing,
    empty or non-UTF-8 file."""
    path = source_file(d)
    if path is None:
        return _read(d.name, None, 0, 0)
    try:
        st = path.stat()
        if not path.is_file():
            raise UsageError(f"{source_label(d.name, str(path))}: not a file")
    except FileNotFoundError:
        if d.name == "shakespeare":
            raise UsageError(
                f"data=shakespeare: no tiny shakespeare file {path}; put input.txt there (data.root=DIR sets the "
                "folder above shakespeare_char/): it is nanoGPT's data/shakespeare_char/input.txt, or "
                "data/tinyshakespeare/input.txt of the karpathy/char-rnn repository") from None
        raise UsageError(f"data.path {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{source_label(d.name, str(path))}: cannot read: {exc.strerror or exc}") from None
    return _read(d.name, str(path), st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------------------------------------
# sizes, for planning (torch-free)


def split_sizes_of(n: int) -> tuple[int, int, int]:
    """(train, validation, test) characters of a text of n characters (see split_sizes)."""
    n_train = int(n * TRAIN_FRACTION)
    n_val = (n - n_train) // 2
    return n_train, n_val, n - n_train - n_val


def split_sizes(cfg: Cfg) -> tuple[int, int, int]:
    """(train, validation, test) characters: the first 90%, then the rest's two halves."""
    return split_sizes_of(len(corpus(cfg.data).tokens))


def vocab_size(cfg: Cfg) -> int:
    """The number of distinct characters in the whole text (the model's vocabulary)."""
    return len(corpus(cfg.data).vocab)


def window_offsets(n: int, block: int, count: int) -> np.ndarray:
    """`count` offsets evenly spaced from 0 to n - block - 1 (the last window's target ends the split),
    rounded down; they repeat where count exceeds the n - block distinct windows."""
    last = n - block - 1
    return (np.arange(count, dtype=np.int64) * last) // max(count - 1, 1)


def windows(tokens: np.ndarray, block: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """A split's fixed windows [count, block] and their next-character targets [count, block]."""
    idx = window_offsets(len(tokens), block, count)[:, None] + np.arange(block, dtype=np.int64)
    return tokens[idx], tokens[idx + 1]


def fixed_windows(x: Any, block: int, count: int) -> Any:
    """`windows`' inputs for every member at once: x [M, n] (a split's characters, torch) as [M, count,
    block], the same `count` evenly spaced windows for every member (paired)."""
    import torch

    offsets = torch.from_numpy(window_offsets(x.shape[1], block, count)).to(x.device)
    return x[:, offsets[:, None] + torch.arange(block, device=x.device)]


def whole_count(n: int, block: int) -> int:
    """The number of non-overlapping windows of `block` characters whose targets fit in a split of n."""
    return (n - 1) // block


def whole_windows(tokens: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Every non-overlapping window of a split [W, block] and its targets [W, block], W = whole_count:
    window i reads tokens[i*block : (i+1)*block] and scores tokens[i*block+1 : (i+1)*block+1]."""
    w = whole_count(len(tokens), block)
    return tokens[: w * block].reshape(w, block), tokens[1 : w * block + 1].reshape(w, block)


def judges_whole(d: Cfg) -> bool:
    """Whether a text config's test split is judged whole (data.eval_windows null), not sampled."""
    return d.get("eval_windows") is None


def held_out_rows(cfg: Cfg) -> tuple[int, int]:
    """(validation windows, test windows) a member is evaluated on (torch-free)."""
    d, block = cfg.data, int(block_size(cfg))
    if not judges_whole(d):
        return int(d.eval_windows), int(d.eval_windows)
    return int(d.val_windows), whole_count(split_sizes(cfg)[2], block)


# ---------------------------------------------------------------------------------------------
# tensors


def make_dataset(cfg: Cfg) -> Dataset:
    """The text as a data.Dataset, the same for every seed and member (cached per process): x = the
    training split's tokens [train_characters] int64 (`sample` draws the batches), y = an empty int64
    tensor, x_val / y_val = the validation split's fixed windows of `block_size(cfg)` characters and
    their next characters [windows, block_size], x_test / y_test the test split's (the whole split's
    non-overlapping windows by default, else `data.eval_windows` fixed windows as validation's); info:
    source, sizes, the characters each held-out split scores, vocabulary (and sha256 for a file)."""
    with _LOCK:
        c = corpus(cfg.data)
        whole = judges_whole(cfg.data)
        block = block_size(cfg)
        count = int(cfg.data.val_windows if whole else cfg.data.eval_windows)
        key = (id(c), block, count, whole)
        if key not in _DATASETS or _DATASETS[key][0] is not c:
            _DATASETS[key] = (c, _dataset(c, block, count, whole))
            if len(_DATASETS) > 32:
                _DATASETS.pop(next(iter(_DATASETS)))
        return _DATASETS[key][1]


_DATASETS: dict[tuple[int, int, int, bool], tuple[Corpus, Any]] = {}
_LOCK = threading.RLock()  # two stacks may load their text at once (runs/beside.py): read and cut once


def _dataset(c: Corpus, block: int, count: int, whole: bool = False) -> Dataset:
    import torch

    from activation_bench.data.synthetic import Dataset

    n_train, n_val, n_test = split_sizes_of(len(c.tokens))
    train, val, test = np.split(c.tokens, [n_train, n_train + n_val])
    (xv, yv), (xt, yt) = windows(val, block, count), (whole_windows(test, block) if whole else
                                                      windows(test, block, count))
    info: dict[str, Any] = {"source": c.source, "characters": len(c.tokens), "vocab_size": len(c.vocab),
                            "train_characters": n_train, "val_characters": n_val, "test_characters": n_test,
                            **({"val_windows": count, "test_windows": "whole", "val_scored": count * block,
                                "test_scored": len(xt) * block} if whole else {"eval_windows": count}),
                            "block_size": block, "vocab": c.vocab}
    if c.sha256 is not None:
        info["sha256"] = c.sha256

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a))

    return Dataset(t(train), torch.empty(0, dtype=torch.int64), t(xv), t(yv), t(xt), t(yt), info)


def sample(tokens: torch.Tensor | list[torch.Tensor], gens: list[torch.Generator], block: int,
           batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's random training windows, nanoGPT's get_batch for M members at once.

    tokens: [M, L] (a shared split as `train.expand(M, -1)` costs no copy) or a list of M 1-D tensors;
    gens: one CPU generator per member, `synthetic.generator(seed, "batches")` made by the caller once
    per run and reused step after step. Member m's offsets are `torch.randint(L_m - block, (batch,),
    generator=gens[m])`, exactly get_batch's draw; x[m, b] = tokens[m][i:i+block] and y[m, b] =
    tokens[m][i+1:i+1+block] for its b-th offset i. Returns (x, y), each [M, batch, block] int64 on
    the tokens' device; one gather (or one index) for the whole batch."""
    import torch

    if isinstance(tokens, torch.Tensor):
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [M, L] or a list of M 1-D tensors, got shape {tuple(tokens.shape)}")
        lengths = [tokens.shape[1]] * tokens.shape[0]
    else:
        lengths = [len(t) for t in tokens]
    if len(gens) != len(lengths):
        raise ValueError(f"{len(lengths)} members' tokens but {len(gens)} generators")
    offsets = torch.stack([torch.randint(n - block, (batch,), generator=g) for n, g in zip(lengths, gens)])
    idx = offsets[:, :, None] + torch.arange(block + 1)  # [M, B, T + 1]
    m = len(lengths)
    if isinstance(tokens, torch.Tensor):
        idx = idx.to(tokens.device)
        w = tokens.gather(1, idx.view(m, -1)).view(m, batch, block + 1)
    elif all(t is tokens[0] for t in tokens):  # one shared split
        w = tokens[0][idx.to(tokens[0].device)]
    else:
        starts = torch.tensor([0, *lengths[:-1]]).cumsum(0)
        flat = torch.cat(list(tokens))
        w = flat[(idx + starts[:, None, None]).to(flat.device)]
    return w[..., :-1].contiguous(), w[..., 1:].contiguous()


def block_size(cfg: Cfg) -> Any:
    """The window length: data.block_size, else model.block_size (the transformer's); None: neither."""
    own = cfg.data.get("block_size")
    if own is not None:
        return own
    model = cfg.get("model")
    return model.get("block_size") if isinstance(model, dict) else None
