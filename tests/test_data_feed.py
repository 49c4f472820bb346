"""The data seam (data/feed.py, data/registry.py): each kind of source is one registered object the
engine asks, and a source of rows can judge its test split once at the end through the same path as
a text's whole split (engine/whole_split.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from activation_bench.cfg import Cfg
from activation_bench.config.compose import compose, compose_many
from activation_bench.data import registry
from activation_bench.data.feed import Feed, Split, Synthetic
from activation_bench.data.text_feed import Text, Windows
from activation_bench.engine import plan, train

TINY = ["data.n_samples=12", "data.input_dim=3", "model.hidden_dim=5", "data.n_val=4"]


@pytest.fixture
def own_source():
    """Registers sources for one test and restores the registry after it."""
    before = dict(registry.SOURCES)
    yield registry.register
    registry.SOURCES.clear()
    registry.SOURCES.update(before)


def test_each_data_name_has_its_kind_and_the_kind_answers_for_it():
    cases = {"normal": Synthetic, "uniform": Synthetic, "diabetes": Split, "digits": Split, "function": Split,
             "python_docs": Text}
    text = ["model=transformer", "batch_size=4"]
    cfgs = compose_many([[f"data={name}", *(text if name == "python_docs" else [])] for name in cases])
    for (name, kind), cfg in zip(cases.items(), cfgs):
        assert type(registry.of(cfg)) is kind, name
    normal, diabetes, digits, text = (cfgs[i] for i in (0, 2, 3, 5))
    assert [plan.classifies(c) for c in (normal, diabetes, digits, text)] == [False, False, True, True]
    assert [registry.of(c).thread_safe(c.data) for c in (normal, diabetes, text)] == [True, True, True]
    assert not any(Split().thread_safe(Cfg({"name": name})) for name in ("mnist1d", "mnist", "cifar10"))


def test_a_text_stack_is_fed_windows_and_a_table_stack_rows():
    text, table = compose_many([["model=transformer", "data=python_docs", "batch_size=4", "model.n_layer=1",
                                 "model.n_embd=16", "model.n_head=2", "model.block_size=8", "data.steps=3",
                                 "data.val_windows=4", "epochs=1"], ["data=diabetes", "batch_size=64", "shuffle=true"]])
    stack = train._build([text, text])
    assert isinstance(stack.feed, Windows) and stack.feed.judged_at_end
    assert stack.x.shape[0] == 2 and stack.x.dim() == 2  # one copy of the characters, expanded
    assert [tuple(x.shape) for x, _ in stack.batches()] == [(2, 4, 8)] * 3
    stack = train._build([table])
    assert type(stack.feed) is Feed and not stack.feed.judged_at_end and set(stack.shufflers) == {0}
    n = stack.x.shape[1]
    assert sum(x.shape[1] for x, _ in stack.batches()) == n and len(stack.batches()) == -(-n // 64)


class _JudgedRows(Feed):
    """Rows whose test split is judged once at the end, per row: each row's squared error."""

    judged_at_end = True

    def judge(self, predict, x, y):
        per_row = ((predict(x) - y) ** 2).mean(dim=-1)
        return per_row.double().cpu().numpy(), None


class _JudgedSplit(Split):
    name = "judged-split"

    def feed(self, cfg, data, seeds, device):
        return _JudgedRows(cfg, data, seeds, device)


def test_a_source_of_rows_judges_its_test_split_at_the_end_through_the_same_path(own_source):
    cfg = compose(["data=diabetes", "epochs=4", "lr=0.01"])
    (every_epoch,) = train.train([cfg])
    own_source(_JudgedSplit())
    (judged,) = train.train([cfg])
    assert judged.train_loss == every_epoch.train_loss and judged.val_loss == every_epoch.val_loss
    best = min(range(4), key=lambda e: (judged.val_loss[e], e))
    at = {e for e, v in enumerate(judged.test_loss) if not math.isnan(v)}
    assert at == {best, 3}  # evaluated at the best validation epoch and the last only
    assert set(judged.test_items) == {"early_stop_loss", "final_loss"}  # a regressor: no accuracy
    assert len(judged.test_items["final_loss"]) == judged.data_info["n_test"]
    for e, col in ((3, "final_loss"), (best, "early_stop_loss")):
        assert judged.test_loss[e] == pytest.approx(float(np.mean(judged.test_items[col])), rel=1e-7)  # in float32
        assert judged.test_loss[e] == pytest.approx(every_epoch.test_loss[e], rel=1e-5)  # float32's mean
    assert every_epoch.test_items is None


def test_the_engine_loads_through_the_registered_source(own_source):
    loaded: list[int] = []

    class Counted(Synthetic):
        name = "counted"

        def load(self, cfg, teacher):
            loaded.append(cfg.seed)
            return super().load(cfg, teacher)

    cfgs = compose_many([[*TINY, "epochs=2", f"seed={s}"] for s in (0, 1)])
    plain = train.train(cfgs)
    own_source(Counted())
    counted = train.train(cfgs)
    assert sorted(loaded) == [0, 1]
    assert [r.train_loss for r in counted] == [r.train_loss for r in plain]
    assert torch.equal(train.load_data(cfgs[0]).x, registry.of(cfgs[0]).load(cfgs[0], None).x)
