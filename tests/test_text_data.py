"""Text data (data/text.py): the vocabulary and splits, the fixed evaluation windows, sample() against
nanoGPT's get_batch, python_docs, and one-line refusals of bad input."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
import yaml

from activation_bench.cfg import Cfg
from activation_bench.config import validate as config_validate
from activation_bench.config.compose import compose
from activation_bench.config.files import config_dir
from activation_bench.config.hashing import config_hash
from activation_bench.config.schema import DataConfig
from activation_bench.data import text, text_checks
from activation_bench.data.synthetic import generator
from activation_bench.errors import UsageError

TEXT = "hello world, this is a small text.\n" * 5 + "The end!"  # 183 characters


def _cfg(source: str = "text", block: int = 4, **data: object) -> Cfg:
    """A composed default config whose data is configs/data/SOURCE.yaml (over the schema's defaults) and
    whose model has a block_size: what model=transformer will compose, built by hand until it exists."""
    cfg = compose([])
    node = {**dataclasses.asdict(DataConfig()),
            **yaml.safe_load((config_dir() / "data" / f"{source}.yaml").read_text(encoding="utf-8")), **data}
    cfg["data"] = Cfg.wrap(node)
    cfg["model"]["block_size"] = block
    return cfg


def _write(tmp_path: Path, content: str | bytes = TEXT, name: str = "t.txt") -> Path:
    path = tmp_path / name
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


def _one_line_refusal(cfg: Cfg, message: str) -> str:
    with pytest.raises(UsageError) as info:
        config_validate.validate(cfg)
    err = str(info.value)
    assert "\n" not in err and message in err, err
    return err


def test_vocabulary_and_split_sizes(tmp_path):
    path = _write(tmp_path)
    cfg = _cfg(path=str(path))
    text_checks.validate(cfg)
    assert cfg.data.path == str(path.resolve()) and len(cfg.data.sha256) == 64
    chars = sorted(set(TEXT))  # nanoGPT's prepare.py
    assert text.vocab_size(cfg) == len(chars) and text.corpus(cfg.data).vocab == "".join(chars)
    n = len(TEXT)
    n_train = int(n * 0.9)
    n_val = (n - n_train) // 2
    assert text.split_sizes(cfg) == (n_train, n_val, n - n_train - n_val) == (164, 9, 10)
    ds = text.make_dataset(cfg)
    stoi = {c: i for i, c in enumerate(chars)}
    encoded = torch.tensor([stoi[c] for c in TEXT], dtype=torch.int64)
    assert ds.x.dtype == torch.int64 and ds.x.equal(encoded[:n_train])
    assert ds.y.dtype == torch.int64 and ds.y.numel() == 0
    assert ds.info["characters"] == n and ds.info["vocab_size"] == len(chars)
    assert (ds.info["train_characters"], ds.info["val_characters"], ds.info["test_characters"]) == (164, 9, 10)
    assert ds.info["sha256"] == cfg.data.sha256 and str(path.resolve()) in ds.info["source"]


def test_fixed_windows_and_targets_shifted_by_one(tmp_path):
    cfg = _cfg(path=str(_write(tmp_path)), block=4, eval_windows=3)
    text_checks.validate(cfg)
    ds = text.make_dataset(cfg)
    corpus = text.corpus(cfg.data).tokens
    val, test = corpus[164:173], corpus[173:]
    assert ds.x_val.shape == ds.y_val.shape == ds.x_test.shape == ds.y_test.shape == (3, 4)
    assert ds.x_val.dtype == ds.y_val.dtype == torch.int64
    for x, y, split in ((ds.x_val, ds.y_val, val), (ds.x_test, ds.y_test, test)):
        last = len(split) - 4 - 1  # the last window's target ends the split
        offsets = [0, last // 2, last]  # evenly spaced, rounded down
        assert text.window_offsets(len(split), 4, 3).tolist() == offsets
        for row, i in enumerate(offsets):
            assert x[row].tolist() == split[i:i + 4].tolist() and y[row].tolist() == split[i + 1:i + 5].tolist()
        assert x[:, 1:].equal(y[:, :-1])
    assert text.window_offsets(100, 10, 1).tolist() == [0]


def test_fixed_windows_are_the_same_for_every_seed(tmp_path):
    path = str(_write(tmp_path))
    a, b = _cfg(path=path), _cfg(path=path)
    b["seed"] = 7
    for c in (a, b):
        text_checks.validate(c)
    da, db = text.make_dataset(a), text.make_dataset(b)
    for k in ("x", "x_val", "y_val", "x_test", "y_test"):
        assert getattr(da, k).equal(getattr(db, k))


def _get_batch(data: torch.Tensor, block: int, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's train.py get_batch, with a generator."""
    ix = torch.randint(len(data) - block, (batch,), generator=gen)
    x = torch.stack([data[i:i + block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
    return x, y


def test_sample_is_nanogpts_get_batch_per_member():
    data = torch.randint(0, 50, (300,), dtype=torch.int64)
    seeds, block, batch = [0, 1, 5], 16, 7
    want = [_get_batch(data, block, batch, generator(s, "batches")) for s in seeds]
    for tokens in (data.expand(3, -1), [data] * 3, [data.clone() for _ in seeds]):
        gens = [generator(s, "batches") for s in seeds]
        for step in range(2):  # the generators advance step after step as get_batch's would
            x, y = text.sample(tokens, gens, block, batch)
            assert x.shape == y.shape == (3, batch, block) and x.dtype == torch.int64
            if step == 0:
                for m in range(3):
                    assert x[m].equal(want[m][0]) and y[m].equal(want[m][1])
    # members of different lengths: each offset drawn within its own member's tokens
    gens = [generator(s, "batches") for s in seeds]
    parts = [data[:100], data[100:250], data[250:]]
    x, y = text.sample(parts, gens, 8, 5)
    for m, part in enumerate(parts):
        wx, wy = _get_batch(part, 8, 5, generator(seeds[m], "batches"))
        assert x[m].equal(wx) and y[m].equal(wy)


def test_python_docs_loads():
    cfg = _cfg("python_docs", block=32)
    text_checks.validate(cfg)
    from pydoc_data.topics import topics

    whole = "\n".join(topics[k] for k in sorted(topics))
    c = text.corpus(cfg.data)
    assert len(c.tokens) == len(whole) > 100_000 and c.vocab == "".join(sorted(set(whole)))
    assert sum(text.split_sizes(cfg)) == len(whole) and text.vocab_size(cfg) == len(set(whole))
    ds = text.make_dataset(cfg)
    assert ds.x_val.shape == (64, 32) and "sha256" not in ds.info and "pydoc_data" in ds.info["source"]
    assert cfg.data.sha256 is None and cfg.data.path is None


def test_shakespeare_reads_data_root_and_checks_its_sha256(tmp_path, monkeypatch):
    folder = tmp_path / "data" / "shakespeare_char"
    folder.mkdir(parents=True)
    _write(folder, TEXT, "input.txt")
    monkeypatch.chdir(tmp_path)
    err = _one_line_refusal(_cfg("shakespeare", root="data"), "not the tiny shakespeare this config expects")
    assert "data.sha256=null" in err
    cfg = _cfg("shakespeare", root="data", sha256=None)
    text_checks.validate(cfg)
    assert cfg.data.root == str(tmp_path / "data") and cfg.data.sha256 == text.corpus(cfg.data).sha256
    monkeypatch.setenv("ACTBENCH_CACHE_DIR", str(tmp_path / "empty"))
    err = _one_line_refusal(_cfg("shakespeare"), "no tiny shakespeare file")
    assert str(tmp_path / "empty" / "shakespeare_char" / "input.txt") in err
    assert "nanoGPT's data/shakespeare_char/input.txt" in err and "karpathy/char-rnn" in err


@pytest.mark.parametrize(("content", "data", "message"), [
    (None, {}, "no such file"),
    ("", {}, "empty file"),
    (b"abc\ndef\xff ghi" * 20, {}, "not UTF-8 text: byte 7 (0xff, line 2)"),
    ("x" * 60, {}, "its validation split has 3 characters, and each split needs more than block_size + 1 = 5"),
    (TEXT, {"steps": 0}, "data.steps (optimiser steps per epoch) must be a positive integer, got 0"),
    (TEXT, {"val_windows": None}, "data.val_windows (fixed windows of the validation split) must be a positive"),
    (TEXT, {"eval_windows": 0}, "data.eval_windows"),
    (TEXT, {"n_samples": 10}, "data.n_samples does not apply to data=text"),
    (TEXT, {"input_dim": 64}, "data.input_dim does not apply"),
    (TEXT, {"target": "random"}, "data.target does not apply"),
    (TEXT, {"mean": 0.0}, "data.mean does not apply"),
    (TEXT, {"val_fraction": 0.2}, "data.val_fraction does not apply"),
    (TEXT, {"root": "/tmp"}, "data.root (the folder holding shakespeare_char/input.txt) applies to data=shakespeare"),
    (TEXT, {"task": "regression"}, "data.task must be language_model"),
    (TEXT, {"n_val": 5}, "data.n_val does not apply"),
])
def test_bad_input_is_one_line(tmp_path, content, data, message):
    path = tmp_path / "t.txt"
    if content is not None:
        _write(tmp_path, content)
    _one_line_refusal(_cfg(path=str(path), **data), message)


def test_text_needs_a_window_length_and_a_path(tmp_path):
    cfg = _cfg(path=str(_write(tmp_path)))
    del cfg["model"]["block_size"]
    _one_line_refusal(cfg, "data=text is text: it needs a model with model.block_size")
    _one_line_refusal(_cfg(path=str(_write(tmp_path)), block=0), "model.block_size (the window length) must be")
    _one_line_refusal(_cfg(), "data=text needs data.path=FILE")
    _one_line_refusal(_cfg("python_docs", path="x.txt"), "data.path applies to data=text, not data=python_docs")


def test_text_keys_and_task_refused_elsewhere():
    for override, message in (("data.steps=5", "data.steps applies to the text sources"),
                              ("data.eval_windows=5", "data.eval_windows applies to the text sources"),
                              ("data.val_windows=5", "data.val_windows applies to the text sources"),
                              ("data.task=language_model", "data.task=language_model applies to the text sources")):
        with pytest.raises(UsageError, match=message):
            compose([override])
        with pytest.raises(UsageError, match=message):
            compose(["data=diabetes", override])


def test_existing_config_hashes_are_unchanged():
    # computed before the text keys existed: null steps / eval_windows leave the hash as it was
    assert config_hash(compose([])) == "d7378612aec1fba2"
    assert config_hash(compose(["data=diabetes"])) == "e8801ba80255b8f4"
    assert config_hash(compose(["data=mnist1d"])) == "754d35f16768e94a"
    assert config_hash(compose(["data=uniform"])) == "1c04fec1d63217a8"


def test_corpus_is_read_once_per_file(tmp_path):
    path = _write(tmp_path)
    cfg = _cfg(path=str(path))
    first = text.corpus(cfg.data)
    assert text.corpus(cfg.data) is first
    path.write_text(TEXT + "Z")  # a changed file is read again
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    again = text.corpus(cfg.data)
    assert again is not first and "Z" in again.vocab and len(again.tokens) == len(TEXT) + 1


@pytest.mark.parametrize(("content", "args", "message"), [
    (None, [], "no such file"),
    ("", [], "empty file, no text"),
    (b"abc\ndef\xff ghi" * 20, [], "not UTF-8 text: byte 7"),
    ("x" * 60, ["model.block_size=4"], "its validation split has 3 characters"),
    (TEXT, ["data.steps=0"], "data.steps (optimiser steps per epoch) must be a positive integer"),
    (TEXT, ["data.eval_windows=0"], "data.eval_windows"),
    (TEXT, ["data.n_samples=10"], "data.n_samples does not apply to data=text"),
])
def test_bad_input_through_the_cli_is_one_line_and_exit_2(tmp_path, runner, content, args, message):
    from activation_bench.cli.main import app

    path = tmp_path / "t.txt"
    if content is not None:
        _write(tmp_path, content)
    result = runner.invoke(app, ["config", "model=transformer", "batch_size=4", "data=text", f"data.path={path}",
                                 "model.block_size=8", *args])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err


def test_a_good_text_config_composes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path)
    cfg = compose(["model=transformer", "batch_size=4", "data=text", "data.path=t.txt", "model.block_size=4"])
    assert cfg.data.path == str(tmp_path / "t.txt") and len(cfg.data.sha256) == 64
    assert (cfg.data.steps, cfg.data.eval_windows, cfg.data.val_windows, cfg.data.task) == (100, None, 64,
                                                                                           "language_model")
    cfg = compose(["model=transformer", "batch_size=4", "data=python_docs"])
    ds, block = text.make_dataset(cfg), cfg.model.block_size
    assert ds.x_val.shape == (64, block)
    assert ds.x_test.shape == ((text.split_sizes(cfg)[2] - 1) // block, block)  # the whole test split
    # data.eval_windows=N samples both splits, as runs made before the whole test split did
    cfg = compose(["model=transformer", "batch_size=4", "data=python_docs", "data.eval_windows=5"])
    assert cfg.data.val_windows is None and text.make_dataset(cfg).x_test.shape == (5, block)


def test_the_whole_test_split_scores_every_character_but_the_first_and_the_tail(tmp_path):
    cfg = _cfg(path=str(_write(tmp_path)), block=4, eval_windows=None, val_windows=3)
    text_checks.validate(cfg)
    ds = text.make_dataset(cfg)
    test = text.corpus(cfg.data).tokens[173:]  # 10 characters: (10 - 1) // 4 = 2 windows
    assert ds.x_val.shape == (3, 4) and ds.x_test.shape == ds.y_test.shape == (2, 4)
    assert ds.x_test.flatten().tolist() == test[:8].tolist() and ds.y_test.flatten().tolist() == test[1:9].tolist()
    assert (ds.info["test_windows"], ds.info["test_scored"], ds.info["val_scored"]) == ("whole", 8, 12)
    for n, block in ((10, 4), (9, 4), (55_770, 32), (55_770, 64)):
        w = text.whole_count(n, block)
        assert w * block + 1 <= n < (w + 1) * block + 1  # no window more fits
