"""Tuning (analysis/tune.py, selection.py) recomputed by hand on small hand-made per-run tables: no training."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from activation_bench.analysis import expected_best, selection, tune
from activation_bench.errors import UsageError
from activation_bench.render.tuned_curves import choice_label


def table(rows: list[tuple]) -> pd.DataFrame:
    """(activation, lr, seed, score[, status]) -> a run_values-like frame; score is the log10 column."""
    out = []
    for r in rows:
        act, lr, seed, score = r[:4]
        status = r[4] if len(r) > 4 else "ok"
        out.append({"activation": act, "lr": lr, "seed": str(seed), "log10": score if status == "ok" else np.nan,
                    "value": 10.0**score if status == "ok" else np.nan, "status": status})
    return pd.DataFrame(out)


GRID = ("0.001", "0.01", "0.1")


def test_split_seeds_numeric_order_and_default_third():
    seeds = [str(s) for s in (10, 2, 0, 1, 9, 3, 4, 5, 6, 7, 8)]
    tune_s, eval_s = tune.split_seeds(seeds, None)  # ceil(11 / 3) = 4
    assert tune_s == ["0", "1", "2", "3"]
    assert eval_s == ["4", "5", "6", "7", "8", "9", "10"]
    assert not set(tune_s) & set(eval_s)
    assert tune.split_seeds(["0", "1", "2", "3"], None) == (["0", "1"], ["2", "3"])  # at least 2
    assert tune.split_seeds(["5", "6", "7"], 1) == (["5"], ["6", "7"])


def test_grid_seeds_find_the_tuning_seeds_of_a_search_judgement():
    # seeds 7 and 9 hold the grid; seeds 3, 4 and 12 one value per group (each group's chosen lr)
    rows = [(act, lr, seed, -1.0) for act in ("relu", "gelu") for lr in GRID for seed in (7, 9)]
    rows += [("relu", "0.01", seed, -1.0) for seed in (3, 4, 12)] + [("gelu", "0.1", seed, -1.0) for seed in (3, 4, 12)]
    values = table(rows)
    assert tune.grid_seeds(values, ["activation"], ["lr"]) == ["7", "9"]
    assert tune.split_seeds(["7", "9", "3", "12", "4"], 2, smallest=False) == (["7", "9"], ["3", "4", "12"])
    full = table([(act, lr, seed, -1.0) for act in ("relu", "gelu") for lr in GRID for seed in range(6)])
    assert tune.grid_seeds(full, ["activation"], ["lr"]) is None  # every seed has the grid: the default third
    one = table([("relu", "0.01", seed, -1.0) for seed in range(4)])
    assert tune.grid_seeds(one, ["activation"], ["lr"]) is None


@pytest.mark.parametrize(("n", "k"), [(3, 2), (4, 3), (2, None), (5, 5)])
def test_split_seeds_refuses_fewer_than_two_to_evaluate(n, k):
    with pytest.raises(UsageError, match="at least 2"):
        tune.split_seeds([str(s) for s in range(n)], k)


def test_selection_by_hand_on_tuning_seeds_only():
    rows = []
    # relu: tuning seeds 0, 1. lr 1e-3: (-1, -2) -> -1.5; 1e-2: (-2, -2.2) -> -2.1; 1e-1: (-1.9, -2.2) -> -2.05
    for lr, s0, s1 in (("0.001", -1.0, -2.0), ("0.01", -2.0, -2.2), ("0.1", -1.9, -2.2)):
        rows += [("relu", lr, 0, s0), ("relu", lr, 1, s1)]
    # gelu: best at 1e-1 (the grid's edge): -3 on both
    for lr, s in (("0.001", -1.0), ("0.01", -2.0), ("0.1", -3.0)):
        rows += [("gelu", lr, 0, s), ("gelu", lr, 1, s)]
    # evaluation seeds 2, 3: a selection that looked at them would pick relu lr 1e-3 (-9)
    for act, lr, seed in itertools.product(("relu", "gelu"), GRID, (2, 3)):
        rows.append((act, lr, seed, -9.0 if (act, lr) == ("relu", "0.001") else -0.5))
    values = table(rows)
    sel = selection.select(values, ["activation"], ["lr"], ["0", "1"], ["2", "3"])
    chosen = sel.chosen.set_index("activation")
    assert chosen.loc["relu", "lr"] == "0.01"
    assert chosen.loc["relu", "tune_score"] == pytest.approx(-2.1)
    assert chosen.loc["gelu", "lr"] == "0.1"
    assert chosen.loc["gelu", "tune_score"] == pytest.approx(-3.0)
    assert list(chosen["tune_n"]) == [2, 2]
    assert sel.grid == {"lr": list(GRID)}
    assert "chosen lr=0.1, the grid's largest value, for activation=gelu: widen the grid" in sel.notes
    assert not any("relu" in n for n in sel.notes)
    ev = tune.evaluated(values, sel)
    assert sorted(ev["seed"].unique()) == ["2", "3"]  # disjoint from the tuning seeds
    got = {(a, lr) for a, lr in ev[["activation", "lr"]].itertuples(index=False)}
    assert got == {("relu", "0.01"), ("gelu", "0.1")}
    assert len(ev) == 4 and (ev["log10"] == -0.5).all()


def test_tie_goes_to_the_first_grid_value():
    rows = [("relu", lr, s, -13.0) for lr in ("0.1", "0.01", "0.001") for s in (0, 1)]  # all at the float floor
    rows += [("relu", lr, s, -1.0) for lr in GRID for s in (2, 3)]
    sel = selection.select(table(rows), ["activation"], ["lr"], ["0", "1"], ["2", "3"])
    assert sel.chosen["lr"].tolist() == ["0.001"]  # smallest lr, although 0.1 came first in the table
    assert "chosen lr=0.001, the grid's smallest value, for activation=relu: widen the grid" in sel.notes
    assert "first value in grid order" in tune.method_note(sel, "best")


def test_grid_order_is_numeric_not_alphabetical():
    assert selection.sort_values(["1e-05", "0.3", "0.0001", "10", "2"]) == ["1e-05", "0.0001", "0.3", "2", "10"]
    assert selection.sort_values(["he", "auto", "lecun"]) == ["auto", "he", "lecun"]


def test_failed_tuning_runs_lose_before_the_score_counts():
    # lr 0.1: one seed diverged, the other very low; lr 0.01 both fine but higher
    rows = [("relu", "0.1", 0, -8.0), ("relu", "0.1", 1, 0.0, "diverged"),
            ("relu", "0.01", 0, -2.0), ("relu", "0.01", 1, -2.0),
            ("relu", "0.001", 0, -1.0), ("relu", "0.001", 1, -1.0)]
    rows += [("relu", lr, s, -1.0) for lr in GRID for s in (2, 3)]
    sel = selection.select(table(rows), ["activation"], ["lr"], ["0", "1"], ["2", "3"])
    assert sel.chosen["lr"].tolist() == ["0.01"]
    ranked = sel.scores.set_index("lr")
    assert ranked.loc["0.1", "n_failed"] == 1 and ranked.loc["0.1", "rank"] == 3


def test_two_tuned_keys():
    rows = []
    scores = {("0.001", "16"): -1.0, ("0.001", "64"): -2.5, ("0.01", "16"): -2.0, ("0.01", "64"): -2.4}
    for (lr, bs), sc in scores.items():
        for s in (0, 1, 2, 3):
            rows.append({"activation": "relu", "lr": lr, "batch_size": bs, "seed": str(s),
                         "log10": sc if s < 2 else -1.0, "value": 1.0, "status": "ok"})
    values = pd.DataFrame(rows)
    sel = selection.select(values, ["activation"], ["lr", "batch_size"], ["0", "1"], ["2", "3"])
    assert sel.chosen[["lr", "batch_size"]].values.tolist() == [["0.001", "64"]]
    notes = " ".join(sel.notes)
    assert "chosen lr=0.001, the grid's smallest value, for activation=relu" in notes
    assert "chosen batch_size=64, the grid's largest value, for activation=relu" in notes
    ev = tune.evaluated(values, sel)
    assert ev[["lr", "batch_size", "seed"]].values.tolist() == [["0.001", "64", "2"], ["0.001", "64", "3"]]


def test_two_keys_with_the_grid_on_the_tuning_seeds_only():
    # studies/transformers/tuned.yaml's layout: a non-rectangular (lr, warmup) grid on seeds 0-2,
    # each group's chosen pair alone on seeds 3-5; compare reads the split from the runs
    grid = {("0.001", "50"): -1.0, ("0.01", "50"): -1.5, ("0.01", "500"): -2.0, ("0.03", "500"): -1.8}
    rows = [{"activation": act, "lr": lr, "warmup_steps": wu, "seed": str(s), "log10": sc + (0.3 if act == "relu"
             and (lr, wu) == ("0.01", "500") else 0.0), "value": 1.0, "status": "ok"}
            for act in ("relu", "geglu") for (lr, wu), sc in grid.items() for s in (0, 1, 2)]
    judged = {"relu": ("0.03", "500"), "geglu": ("0.01", "500")}
    rows += [{"activation": act, "lr": lr, "warmup_steps": wu, "seed": str(s), "log10": -3.0, "value": 1.0,
              "status": "ok"} for act, (lr, wu) in judged.items() for s in (3, 4, 5)]
    values = pd.DataFrame(rows)
    keys = ["lr", "warmup_steps"]
    assert tune.grid_seeds(values, ["activation"], keys) == ["0", "1", "2"]
    sel = selection.select(values, ["activation"], keys, ["0", "1", "2"], ["3", "4", "5"])
    assert sel.chosen[["activation", *keys]].values.tolist() == [["relu", "0.03", "500"], ["geglu", "0.01", "500"]]
    assert "chosen lr=0.03, the grid's largest value, for activation=relu" in " ".join(sel.notes)
    ev = tune.evaluated(values, sel)
    assert sorted(ev["seed"]) == ["3", "3", "4", "4", "5", "5"]  # the judging seeds only, at each choice
    assert {tuple(r) for r in ev[["activation", *keys]].values.tolist()} == {("relu", *judged["relu"]),
                                                                             ("geglu", *judged["geglu"])}


def test_group_missing_a_grid_value_is_named_and_left_out():
    rows = [(act, lr, s, -1.0) for act in ("relu", "gelu") for lr in GRID for s in range(4)]
    rows = [r for r in rows if not (r[0] == "gelu" and r[1] == "0.1")]
    values = table(rows)
    sel = selection.select(values, ["activation"], ["lr"], ["0", "1"], ["2", "3"])
    assert sel.chosen["activation"].tolist() == ["relu"]
    assert sel.dropped == ["activation=gelu"]
    assert any(n.startswith("activation=gelu: no tuning run with lr=0.1") and "left out" in n for n in sel.notes)
    assert set(tune.evaluated(values, sel)["activation"]) == {"relu"}


def test_group_missing_a_grid_value_on_the_tuning_seeds_only():
    rows = [(act, lr, s, -1.0) for act in ("relu", "gelu") for lr in GRID for s in range(4)]
    rows = [r for r in rows if not (r[0] == "gelu" and r[1] == "0.01" and r[2] < 2)]
    sel = selection.select(table(rows), ["activation"], ["lr"], ["0", "1"], ["2", "3"])
    assert sel.dropped == ["activation=gelu"]


def test_own_grid_tunes_each_group_over_the_values_its_runs_have():
    # relu has 1e-3..1e-1, gelu 1e-4..1e-2 (a longer budget around each group's earlier choice)
    rows = [("relu", lr, s, sc) for lr, sc in zip(GRID, (-1.0, -3.0, -2.0)) for s in range(4)]
    rows += [("gelu", lr, s, sc) for lr, sc in zip(("0.0001", "0.001", "0.01"), (-1.0, -2.0, -4.0)) for s in range(4)]
    values = table(rows)
    shared = selection.select(values, ["activation"], ["lr"], ["0", "1"], ["2", "3"])
    assert shared.dropped == ["activation=relu", "activation=gelu"]  # each lacks one of the 4 values
    own = selection.select(values, ["activation"], ["lr"], ["0", "1"], ["2", "3"], own_grid=True)
    assert own.dropped == [] and own.own_grid
    assert own.chosen[["activation", "lr"]].values.tolist() == [["relu", "0.01"], ["gelu", "0.01"]]
    assert own.notes[0] == ("each group tuned over its own grid (--tune-grid own): activation=relu: "
                            "lr 0.001, 0.01, 0.1 | activation=gelu: lr 0.0001, 0.001, 0.01")
    # 0.01 is inside relu's grid and gelu's largest: the edge is each group's own
    assert own.notes[1:] == ["chosen lr=0.01, the largest value of its own grid, for activation=gelu: widen the grid"]
    # the tables' and legends' "grid max" marks follow the same own grids (0.01 is inside the common one)
    relu, gelu = (own.chosen.iloc[i] for i in range(2))
    assert own.grid_of(relu) == {"lr": ["0.001", "0.01", "0.1"]}
    assert own.grid_of(gelu) == {"lr": ["0.0001", "0.001", "0.01"]}
    assert shared.grid_of(relu) == shared.grid == {"lr": ["0.0001", "0.001", "0.01", "0.1"]}
    assert [choice_label(own, relu), choice_label(own, gelu)] == ["lr 0.01", "lr 0.01, grid max"]
    ev = tune.evaluated(values, own)
    assert ev[["activation", "lr", "seed"]].values.tolist() == [
        ["relu", "0.01", "2"], ["relu", "0.01", "3"], ["gelu", "0.01", "2"], ["gelu", "0.01", "3"]]


def test_own_grid_of_two_keys_lists_each_keys_values_ascending_and_finds_its_ends_by_value():
    # relu: lr 3e-3, 1e-2, 3e-2 at warmup 1000, and warmup 500 and 2000 added at lr 1e-2 only (a grid
    # widened around its choice): in grid order (lr first) the combinations give warmup 1000 before 500
    combos = [("0.003", "1000"), ("0.01", "500"), ("0.01", "1000"), ("0.01", "2000"), ("0.03", "1000")]
    scores = {("0.01", "1000"): -3.0, ("0.01", "500"): -2.0, ("0.01", "2000"): -2.5}
    values = pd.DataFrame([{"activation": "relu", "lr": lr, "warmup_steps": w, "seed": str(s),
                            "log10": scores.get((lr, w), -1.0), "status": "ok"}
                           for lr, w in combos for s in range(4)])
    sel = selection.select(values, ["activation"], ["lr", "warmup_steps"], ["0", "1"], ["2", "3"], own_grid=True)
    assert sel.chosen[["lr", "warmup_steps"]].values.tolist() == [["0.01", "1000"]]
    assert sel.notes == ["each group tuned over its own grid (--tune-grid own): activation=relu: "
                         "lr 0.003, 0.01, 0.03; warmup_steps 500, 1000, 2000"]  # 1000 is inside: no edge note
    assert sel.grid_of(sel.chosen.iloc[0]) == {"lr": ["0.003", "0.01", "0.03"], "warmup_steps": ["500", "1000", "2000"]}


def test_own_grid_still_leaves_out_a_group_missing_one_of_its_values_on_the_tuning_seeds():
    rows = [(act, lr, s, -1.0) for act in ("relu", "gelu") for lr in GRID for s in range(4)]
    rows = [r for r in rows if not (r[0] == "gelu" and r[1] == "0.01" and r[2] < 2)]
    sel = selection.select(table(rows), ["activation"], ["lr"], ["0", "1"], ["2", "3"], own_grid=True)
    assert sel.dropped == ["activation=gelu"]
    assert any(n.startswith("activation=gelu: no tuning run with lr=0.01 (its other seeds have it)") for n in sel.notes)


def test_expected_best_closed_form_against_enumeration():
    scores = [3.0, 1.0, 2.0, 2.0]
    n = len(scores)
    for k in range(1, 5):
        draws = list(itertools.product(scores, repeat=k))
        brute = sum(min(d) for d in draws) / len(draws)
        best, p_fail = expected_best.expected_best(scores, k)
        assert best == pytest.approx(brute) and p_fail == 0
    assert expected_best.expected_best(scores, 1)[0] == pytest.approx(np.mean(scores))
    assert expected_best.expected_best([1.0, 2.0, 3.0], 2)[0] == pytest.approx(14 / 9)  # (5*1 + 3*2 + 1*3) / 9
    assert n == 4


def test_expected_best_with_failed_values():
    best, p_fail = expected_best.expected_best([1.0, np.inf], 2)
    # draws (1,1), (1,inf), (inf,1) succeed with best 1; (inf, inf) fails
    assert best == pytest.approx(1.0) and p_fail == pytest.approx(0.25)


def test_budget_per_group():
    rows = [("relu", lr, s, sc) for lr, sc in zip(GRID, (-1.0, -3.0, -2.0)) for s in (0, 1)]
    sel = selection.select(table(rows), ["activation"], ["lr"], ["0", "1"], [])
    b = expected_best.budget(sel)
    assert b["k"].tolist() == [1, 2, 3]
    assert b["expected_best"].iloc[0] == pytest.approx(-2.0)
    assert b["expected_best"].iloc[-1] == pytest.approx((-3 * 19 - 2 * 7 - 1 * 1) / 27)


@pytest.mark.parametrize(("keys", "k", "by", "msg"), [
    (["seed"], None, None, "--tune seed"),
    (["lr"], None, ["activation,lr"], "--tune lr and --by lr"),
    (None, 3, None, "--tune-seeds sets up --tune"),
    (["lr"], 0, None, "--tune-seeds 0"),
    (["lr"], "x", None, "--tune-seeds x"),
])
def test_parse_tune_refuses(keys, k, by, msg):
    with pytest.raises(UsageError, match=msg):
        tune.parse_tune(keys, k, by)


def test_parse_tune_grid():
    assert tune.parse_tune(["lr"], grid="own") == tune.TuneSpec(("lr",), None, "val_loss", "own")
    assert tune.parse_tune(["lr"]).grid == "shared"
    with pytest.raises(UsageError, match="--tune-grid mine: valid: shared, own"):
        tune.parse_tune(["lr"], grid="mine")
    with pytest.raises(UsageError, match="--tune-grid sets up --tune"):
        tune.parse_tune(None, grid="own")


def test_edge_notes_name_the_groups_once_per_end():
    rows = [(f"a{i}", lr, s, -3.0 if lr == "0.1" else -1.0) for i in range(6) for lr in GRID for s in (0, 1)]
    sel = selection.select(table(rows), ["activation"], ["lr"], ["0", "1"], [])
    assert sel.notes == ["chosen lr=0.1, the grid's largest value, for 6 groups (activation=a0; activation=a1; "
                         "activation=a2; activation=a3; and 2 more): widen the grid"]


def test_parse_tune_and_keys():
    spec = tune.parse_tune(["lr,batch_size", "lr"], "6", ["activation"])
    assert spec == tune.TuneSpec(("lr", "batch_size"), 6)
    assert tune.parse_tune(None) is None
    runs = pd.DataFrame({"activation": ["relu", "gelu"], "lr": ["0.001", "0.001"], "seed": ["0", "1"]})
    with pytest.raises(UsageError, match="'batch_size' was not swept"):
        tune.check_keys(spec, list(runs.columns), runs)
    notes = tune.check_keys(tune.TuneSpec(("lr",)), list(runs.columns), runs)
    assert notes == ["--tune lr: every run has lr=0.001; nothing to tune"]
