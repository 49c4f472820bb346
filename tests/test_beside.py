"""Two eager stacks trained at once (runs/beside.py): every file equals the sweep's trained one stack
at a time, at any thread count and through a signal's stop and resume; which stacks may pair; an
error in one stack cancels the other; the progress of both."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from activation_bench.config.compose import compose, compose_many
from activation_bench.data import splits
from activation_bench.engine import plan
from activation_bench.engine.plan import member_bytes
from activation_bench.engine.resume import Preempted
from activation_bench.runs import beside, orchestrate
from activation_bench.runs.progress import SweepProgress
from tests import test_checkpoint
from tests.test_checkpoint import MINI, _run, assert_same_outputs
from tests.test_transformer import TINY_GPT, WHOLE

# two stacks of four members (model.hidden_dim splits them), each with its own data order and dropout
GRID = ["activation=gelu,relu", "seed=0,1", "model.hidden_dim=5,6", *MINI[:2], *MINI[3:], "model.dropout=0.2"]


def _pair_all(monkeypatch) -> list[int]:
    """Every eligible pair of stacks trains at once from here on, however small; the pairs are counted."""
    calls: list[int] = []
    real = beside.train_both

    def counting(*tasks):
        calls.append(len(tasks))
        return real(*tasks)

    monkeypatch.setattr(plan, "BESIDE_MIN_S", 0.0)
    monkeypatch.setattr(beside, "pays", lambda: True)
    monkeypatch.setattr(beside, "train_both", counting)
    return calls


@pytest.fixture
def paired(monkeypatch) -> list[int]:
    return _pair_all(monkeypatch)


@pytest.mark.parametrize("threads", [None, 1])
def test_paired_sweep_equals_one_stack_at_a_time(runner, tmp_path, monkeypatch, threads):
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        ref = _run(runner, tmp_path / "ref", GRID, monkeypatch, command="sweep")
        assert ref.exit_code == 0, ref.output
        calls = _pair_all(monkeypatch)
        both = _run(runner, tmp_path / "b", GRID, monkeypatch, command="sweep")
    finally:
        torch.set_num_threads(before)
    assert both.exit_code == 0, both.output
    assert calls == [2]
    # losses, summaries (the recorded thread count among them) and results.csv, byte for byte
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


def test_paired_sweep_of_a_table_equals_one_stack_at_a_time(runner, tmp_path, monkeypatch):
    """Two learning rates (two stacks) on a real table, shuffled minibatches: each seed's split is
    made once, under a lock, whichever stack asks first."""
    grid = ["data=diabetes", "activation=gelu,relu", "seed=0,1", "lr=0.01,0.003", "model.hidden_dim=5",
            "batch_size=64", "shuffle=true", "epochs=3"]
    ref = _run(runner, tmp_path / "ref", grid, monkeypatch, command="sweep")
    assert ref.exit_code == 0, ref.output
    splits._SPLITS.clear()
    calls = _pair_all(monkeypatch)
    both = _run(runner, tmp_path / "b", grid, monkeypatch, command="sweep")
    assert both.exit_code == 0, both.output
    assert calls == [2]
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


def test_a_gpt_sweep_of_one_stack_trains_as_two_halves_at_once(runner, tmp_path, monkeypatch):
    """Four seeds of a GPT (one stack) with dropout: paired as two stacks of two, every file equals
    the stack of four's, the whole test split judged."""
    grid = [*TINY_GPT, *WHOLE, "data=python_docs", "model.dropout=0.1", "seed=range(4)"]
    ref = _run(runner, tmp_path / "ref", grid, monkeypatch, command="sweep")
    assert ref.exit_code == 0, ref.output
    calls = _pair_all(monkeypatch)
    both = _run(runner, tmp_path / "b", grid, monkeypatch, command="sweep")
    assert both.exit_code == 0, both.output
    assert calls == [2]
    sizes = {json.loads(f.read_text())["stack_size"] for f in (tmp_path / "b" / "r").glob("*/summary.json")}
    assert sizes == {2}
    monkeypatch.setattr(test_checkpoint, "TIMING", (*test_checkpoint.TIMING, "stack_size"))  # 4 against 2
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


def test_halves_split_a_stack_that_would_train_alone():
    def anything(_stacks):
        return True

    eight, three = list(range(8)), [8, 9, 10]
    assert beside.halves([eight], 0, anything) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert beside.halves([eight], 1, anything) == [eight]  # resumed from its checkpoint: as it was
    assert beside.halves([three], 0, anything) == [three]  # a half of one member may train padded
    assert beside.halves([eight, three], 0, anything) == [eight, three]  # a pair already
    assert beside.halves([eight, three, eight], 0, anything) == [eight, three, [0, 1, 2, 3], [4, 5, 6, 7]]
    assert beside.halves([eight], 0, lambda _stacks: False) == [eight]


def test_paired_sweep_stopped_by_a_signal_resumes_bit_for_bit(runner, tmp_path, monkeypatch):
    ref = _run(runner, tmp_path / "ref", GRID, monkeypatch, command="sweep")
    assert ref.exit_code == 0, ref.output
    calls = _pair_all(monkeypatch)
    stopped = _run(runner, tmp_path / "b", GRID, monkeypatch, "TERM@6.1", command="sweep")
    assert stopped.exit_code == 143, stopped.output
    assert "interrupted: 0/8 members done" in stopped.stderr
    assert len(list((tmp_path / "b" / "r" / ".checkpoints").glob("*[0-9a-f].ckpt"))) == 2
    resumed = _run(runner, tmp_path / "b", GRID, monkeypatch, command="sweep")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming stack 1/2 (4 members)" in resumed.stderr and "resuming stack 2/2 (4 members)" in resumed.stderr
    assert calls == [2, 2]
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")
    assert not (tmp_path / "b" / "r" / ".checkpoints").exists()


def test_progress_counts_both_stacks(tmp_path, paired):
    p = orchestrate.plan(GRID, tmp_path, "s")
    orchestrate.write_sweep_file(p)
    seen: list[SweepProgress] = []
    assert orchestrate.train_members(p, range(8), 1024.0, False, seen.append, beside=True) == 8
    assert paired == [2]
    during = [(s.stack, s.beside, s.stacks) for s in seen if s.epochs]
    assert (1, 2, 2) in during and set(during) <= {(1, 2, 2), (2, 0, 2)}  # (2, 0): stack 1 written first
    assert [s.members for s in seen] == sorted(s.members for s in seen)  # never goes back
    per_epoch = orchestrate.steps_per_epoch(p.cfgs[0])
    assert (seen[-1].finished, seen[-1].members, seen[-1].steps) == (8, 8, 8 * per_epoch * 12)


def test_one_stack_at_a_time_without_beside(tmp_path, paired):
    p = orchestrate.plan(GRID, tmp_path, "s")
    orchestrate.write_sweep_file(p)
    assert orchestrate.train_members(p, range(8), 1024.0, False) == 8
    assert paired == []


def test_which_stacks_may_train_beside(monkeypatch):
    cfgs = compose_many([[*MINI, f"seed={s}"] for s in range(4)])
    assert not plan.trains_beside(cfgs)  # a few milliseconds of work: a thread does not pay
    monkeypatch.setattr(plan, "BESIDE_MIN_S", 0.0)
    assert plan.trains_beside(cfgs)
    refused = {
        "a user's activation module": [*MINI, "activation=custom", "activation._target_=act_helpers.ScaledTanh"],
        "mnist1d (its package reseeds NumPy's global generator)": ["data=mnist1d", "epochs=1"],
        "a family that does not allow it": ["model=cnn", "data=mnist1d", "epochs=1"],
    }
    assert plan.trains_beside([compose(["data=diabetes", "epochs=2"])])  # a table: split under a lock
    for why, overrides in refused.items():
        assert not plan.trains_beside([compose(overrides)]), why
    for engine in ("compiled", "saved"):  # a compiled step is not thread-safe (dynamo)
        monkeypatch.setattr(plan, "planned_engine", lambda _cfgs, _store=True, e=engine: (e, "requested"))
        assert not plan.trains_beside(cfgs), engine


def test_two_stacks_pair_only_within_one_stack_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(plan, "BESIDE_MIN_S", 0.0)
    p = orchestrate.plan(GRID, tmp_path, "s")
    stacks, _, _ = orchestrate._stacks(p, range(8), 1024.0, False)
    assert [len(s) for s in stacks] == [4, 4]
    cfgs = [[p.cfgs[i] for i in s] for s in stacks]
    assert beside.pair(cfgs, 1024.0)
    both = sum(member_bytes(c) for c in p.cfgs) / 2**20
    assert not beside.pair(cfgs, both * 0.99)
    assert not beside.pair(cfgs[:1], 1024.0)


def _waits(cancel: threading.Event) -> list[str]:
    if cancel.wait(30):
        raise beside.Cancelled
    return ["finished"]


def _fails(_cancel: threading.Event) -> list[str]:
    raise ValueError("bad member")


@pytest.mark.parametrize("failing", ["here", "there"])
def test_an_error_in_one_stack_cancels_the_other(failing):
    tasks = (_fails, _waits) if failing == "here" else (_waits, _fails)
    outcomes = beside.train_both(*tasks)
    error = beside.first_error(outcomes)
    assert isinstance(error, ValueError)
    assert [type(o.error) for o in outcomes] == [type(error) if t is _fails else beside.Cancelled for t in tasks]
    assert all(o.results is None for o in outcomes)


def test_a_pair_raises_an_error_before_a_stop():
    stop, error = beside.Outcome(error=Preempted(15, 6, 12)), beside.Outcome(error=ValueError("bad"))
    assert beside.first_error((stop, error)) is error.error
    assert beside.first_error((stop, beside.Outcome(results=[]))) is stop.error
    assert beside.first_error((beside.Outcome(results=[]), beside.Outcome(results=[]))) is None


def test_pays_where_measured_or_where_the_threads_fit(monkeypatch):
    monkeypatch.setattr(beside.os, "sched_getaffinity", lambda _pid: set(range(2)))
    for threads, pays in ((1, True), (2, True), (3, False)):
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        assert beside.pays() is pays, threads
    monkeypatch.setattr(beside.os, "sched_getaffinity", lambda _pid: set(range(16)))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    assert beside.pays()
    monkeypatch.setattr(beside.os, "sched_getaffinity", lambda _pid: {0})
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert not beside.pays()
