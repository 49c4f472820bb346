"""actbench rank: Demšar's (2006) worked example, ranks and scores by hand, named tasks, the command,
the critical-difference diagram, and bad input (exit 2)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from activation_bench.analysis import rank as rk
from activation_bench.analysis.loading import load
from activation_bench.analysis.stats import holm
from activation_bench.cli.main import app
from activation_bench.errors import UsageError
from activation_bench.render import rank_tables

# Demšar (2006), Table 6: AUC of C4.5 with and without curtailment (m) and pruning confidence (cf)
# on 14 UCI data sets (higher is better)
DEMSAR_NAMES = ["C4.5", "C4.5+m", "C4.5+cf", "C4.5+m+cf"]
DEMSAR_AUC = [
    [0.763, 0.768, 0.771, 0.798], [0.599, 0.591, 0.590, 0.569], [0.954, 0.971, 0.968, 0.967],
    [0.628, 0.661, 0.654, 0.657], [0.882, 0.888, 0.886, 0.898], [0.936, 0.931, 0.916, 0.931],
    [0.661, 0.668, 0.609, 0.685], [0.583, 0.583, 0.563, 0.625], [0.775, 0.838, 0.866, 0.875],
    [1.000, 1.000, 1.000, 1.000], [0.940, 0.962, 0.965, 0.962], [0.619, 0.666, 0.614, 0.669],
    [0.972, 0.981, 0.975, 0.975], [0.957, 0.978, 0.946, 0.970],
]


@pytest.fixture(scope="module")
def demsar() -> pd.DataFrame:
    return pd.DataFrame(DEMSAR_AUC, columns=DEMSAR_NAMES)


def test_demsar_worked_example(demsar):
    st = rk.rank_matrix(demsar, alpha=0.05, lower_is_better=False)
    mean_rank = st["mean_rank"]
    # the paper's average ranks are 3.143, 2.000, 2.893, 1.964; the printed table gives the first two
    # exactly and the last two half a rank apart on one data set (0.5/14 = 0.036)
    assert mean_rank["C4.5"] == pytest.approx(3.143, abs=1e-3)
    assert mean_rank["C4.5+m"] == pytest.approx(2.000, abs=1e-3)
    assert mean_rank["C4.5+cf"] == pytest.approx(2.893 + 0.5 / 14, abs=1e-3)
    assert mean_rank["C4.5+m+cf"] == pytest.approx(1.964 - 0.5 / 14, abs=1e-3)
    # Friedman: Demšar's chi2_F from the ranks, divided by the tie correction (as R's friedman.test)
    n, k = demsar.shape
    ranks = stats.rankdata(-demsar.to_numpy(), axis=1)
    chi2 = 12 * n / (k * (k + 1)) * (np.sum(ranks.mean(axis=0) ** 2) - k * (k + 1) ** 2 / 4)
    ties = sum(np.sum(c**3 - c) for c in (np.unique(r, return_counts=True)[1] for r in ranks))
    chi2 /= 1 - ties / (n * k * (k**2 - 1))
    assert st["friedman_stat"] == pytest.approx(chi2)
    assert st["friedman_p"] == pytest.approx(stats.chi2.sf(chi2, k - 1))
    # critical differences and q values of the paper (Table 5a: q_0.05 = 2.569, q_0.10 = 2.291 for k = 4)
    assert st["critical_difference"] == pytest.approx(2.569 * math.sqrt(4 * 5 / (6 * 14)), abs=1e-3)
    assert st["critical_difference"] == pytest.approx(1.25, abs=5e-3)
    assert rk.critical_difference(4, 14, 0.10) == pytest.approx(1.12, abs=5e-3)
    # "the post-hoc test is not powerful enough to detect any significant differences" at 0.05
    assert st["groups"] == [["C4.5+m+cf", "C4.5+m", "C4.5+cf", "C4.5"]]
    assert (st["p_nemenyi"].to_numpy() >= 0.05).all()
    # at 0.10, C4.5 is worse than C4.5+m and C4.5+m+cf; C4.5+cf belongs to both groups (Fig. 1a)
    st10 = rk.rank_matrix(demsar, alpha=0.10, lower_is_better=False)
    assert st10["groups"] == [["C4.5+m+cf", "C4.5+m", "C4.5+cf"], ["C4.5+cf", "C4.5"]]
    p = st10["p_nemenyi"]
    differs = {(a, b) for a in DEMSAR_NAMES for b in DEMSAR_NAMES if a < b and p.loc[a, b] < 0.10}
    assert differs == {("C4.5", "C4.5+m"), ("C4.5", "C4.5+m+cf")}
    for a in DEMSAR_NAMES:  # Nemenyi: significant exactly when the mean ranks differ by more than CD
        for b in DEMSAR_NAMES:
            if a != b:
                far = abs(mean_rank[a] - mean_rank[b]) > st10["critical_difference"]
                assert far == (p.loc[a, b] < 0.10)
    # the library on the raw matrix gives the same p-values (imported here: scikit-posthocs loads
    # statsmodels and pyplot, seconds that only this module's tests need)
    import scikit_posthocs as sp

    ref = sp.posthoc_nemenyi_friedman(-demsar.to_numpy())
    np.testing.assert_allclose(p.to_numpy(), ref.to_numpy(), rtol=1e-12)


def test_posthoc_p_values_match_scikit_posthocs(demsar):
    import scikit_posthocs as sp

    rng = np.random.default_rng(0)
    # six groups of six, rounded (ties): 15 pairs for Holm, each a scipy wilcoxon on both sides
    for scores in (demsar, pd.DataFrame(rng.normal(size=(6, 6)).round(1), columns=list("abcdef"))):
        ranks = pd.DataFrame(stats.rankdata(scores.to_numpy(), axis=1), columns=scores.columns)
        ref = sp.posthoc_nemenyi_friedman(scores.to_numpy())
        np.testing.assert_allclose(rk.nemenyi(ranks).to_numpy(), ref.to_numpy(), rtol=1e-12)
        st = rk.rank_matrix(scores, posthoc="wilcoxon")
        long = scores.melt(var_name="g", value_name="v")
        ref = sp.posthoc_wilcoxon(long, val_col="v", group_col="g", zero_method="pratt", p_adjust="holm")
        np.testing.assert_allclose(st["p_wilcoxon"].to_numpy(), ref.loc[scores.columns, scores.columns].to_numpy())


def test_wilcoxon_vs_best_is_holm_over_k_minus_1(demsar):
    st = rk.rank_matrix(demsar, lower_is_better=False)
    best = st["order"][0]
    assert best == "C4.5+m+cf" and st["p_wilcoxon"] is None
    others = [g for g in DEMSAR_NAMES if g != best]
    raw = [stats.wilcoxon(demsar[g], demsar[best], zero_method="pratt").pvalue for g in others]
    for g, adj in zip(others, holm(raw)):
        assert st["p_vs_best"][g] == pytest.approx(adj)
    assert math.isnan(st["p_vs_best"][best])


def test_contiguous_groups():
    order = ["a", "b", "c", "d"]
    p = pd.DataFrame(1.0, index=order, columns=order)
    assert rk.contiguous_groups(order, p, 0.05) == [order]
    p.loc["a", "c"] = p.loc["c", "a"] = 0.01
    p.loc["a", "d"] = p.loc["d", "a"] = 0.01
    p.loc["b", "d"] = p.loc["d", "b"] = 0.01
    assert rk.contiguous_groups(order, p, 0.05) == [["a", "b"], ["b", "c"], ["c", "d"]]
    assert rk.contiguous_groups(order, pd.DataFrame(0.0, index=order, columns=order), 0.05) == [[x] for x in order]


# ---------------------------------------------------------------------------------------------
# from runs

ACTS = ["relu", "gelu", "tanh"]
TASKS = [("normal", "random"), ("normal", "teacher"), ("uniform", "random"), ("uniform", "teacher")]
SEEDS = range(3)


def final_loss(act: str, task: int, seed: int) -> float:
    """gelu best on 3 tasks, relu on one; tanh worst; seed noise that never changes the order."""
    base = {"relu": 1e-3, "gelu": 1e-4, "tanh": 1e-2}[act]
    if task == 2 and act == "relu":
        base = 1e-5
    return base * (1 + 0.1 * seed)


def write_runs(path: Path, loss=final_loss, skip=()) -> Path:
    rows = []
    for t, (data, target) in enumerate(TASKS):
        for act in ACTS:
            for seed in SEEDS:
                if (t, act, seed) in skip or (t, act) in skip:
                    continue
                f = loss(act, t, seed)
                for e, v in enumerate([10 * f, f], 1):
                    rows.append({"activation": act, "data": data, "data.target": target, "seed": seed,
                                 "run": f"{act}_{t}_{seed}", "epoch": e, "train_loss": v})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_rank_from_runs_by_hand(tmp_path):
    res = rk.rank(load([write_runs(tmp_path / "r.csv")]), "final")
    assert res.by == "activation" and res.task_cols == ["data", "data.target"]
    t = res.table.set_index("activation")
    assert list(res.table["activation"]) == ["gelu", "relu", "tanh"]
    assert t.loc["gelu", "mean_rank"] == pytest.approx((1 + 1 + 2 + 1) / 4)
    assert t.loc["relu", "mean_rank"] == pytest.approx((2 + 2 + 1 + 2) / 4)
    assert t.loc["tanh", "mean_rank"] == 3
    assert (t["n_tasks"] == 4).all()
    assert tuple(t.loc["relu", ["wins", "ties", "losses"]]) == (1, 0, 3)
    assert tuple(t.loc["gelu", ["wins", "ties", "losses"]]) == (0, 4, 0)
    # per task score: mean over seeds of log10 final loss
    score = res.scores.loc["data=normal, data.target=random", "relu"]
    assert score == pytest.approx(np.mean([np.log10(final_loss("relu", 0, s)) for s in SEEDS]))
    # statistics on the same matrix
    assert res.friedman_stat == pytest.approx(stats.friedmanchisquare(*res.scores.to_numpy().T).statistic)
    assert t.loc["tanh", "p_nemenyi"] == pytest.approx(rk.rank_matrix(res.scores)["p_nemenyi"].loc["gelu", "tanh"])
    assert res.warnings == []


def test_ties_at_the_floor_share_ranks(tmp_path):
    def floor_loss(act, task, seed):
        return 1e-15 if act in ("relu", "gelu") else 1e-3 * (1 + task)

    res = rk.rank(load([write_runs(tmp_path / "f.csv", floor_loss)]), "final")
    t = res.table.set_index("activation")
    assert t.loc["relu", "mean_rank"] == t.loc["gelu", "mean_rank"] == 1.5
    assert t.loc["tanh", "mean_rank"] == 3
    assert t.loc[res.best, "ties"] == 4


def test_missing_group_and_short_seeds_are_named(tmp_path):
    path = write_runs(tmp_path / "m.csv", skip={(1, "tanh"), (3, "relu", 2)})
    res = rk.rank(load([path]), "final")
    assert len(res.scores) == 3
    assert any("data=normal, data.target=teacher left out" in w and "tanh (no runs)" in w for w in res.warnings)
    assert any("data=uniform, data.target=teacher" in w and "relu (2 of 3)" in w for w in res.warnings)
    assert "data=normal, data.target=teacher" not in res.scores.index


def test_to_eps_counts_not_reached_as_last_epoch_plus_one(tmp_path):
    res = rk.rank(load([write_runs(tmp_path / "t.csv")]), "to=5e-4")
    # epoch 1 loss is 10 * final: gelu (1e-4) reaches 5e-4 at epoch 2, relu never (score 3) except task 2
    assert res.scores.loc["data=normal, data.target=random", "gelu"] == 2
    assert res.scores.loc["data=normal, data.target=random", "relu"] == 3
    assert res.scores.loc["data=uniform, data.target=random", "relu"] == 1


def test_task_option_and_render_formats(tmp_path):
    res = rk.rank(load([write_runs(tmp_path / "r.csv")]), "final", task=["data.target"])
    assert res.task_cols == ["data.target"] and len(res.scores) == 2
    csv_text = rank_tables.to_csv(res)
    assert csv_text.splitlines()[0].split(",")[:3] == ["activation", "mean_rank", "n_tasks"]
    back = pd.read_csv(pd.io.common.StringIO(csv_text))
    assert back["mean_rank"].tolist() == res.table["mean_rank"].tolist()
    doc = json.loads(rank_tables.to_json(res))
    assert doc["friedman"]["statistic"] == pytest.approx(res.friedman_stat)
    assert doc["groups"] == res.groups and doc["rows"][0]["activation"] == res.best
    assert doc["p_nemenyi"]["gelu"]["tanh"] == pytest.approx(res.p_nemenyi.loc["gelu", "tanh"])
    assert doc["p_wilcoxon_holm_all_pairs"] is None
    md = rank_tables.to_markdown(res)
    assert "| activation | mean rank |" in md and "Friedman" in md
    text = rank_tables.table_text(res)
    assert "Critical difference" in text and "best" in text


def test_cd_diagram_is_drawn(tmp_path, demsar):
    st = rk.rank_matrix(demsar, alpha=0.10, lower_is_better=False)
    assert st["groups"]  # the diagram draws them; check the file and the artists
    res = rk.rank(load([write_runs(tmp_path / "r.csv")]), "final")
    fig = rank_tables.draw_cd(res)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith("gelu (1.25)") for t in texts) and any("CD = " in t for t in texts)
    out = rank_tables.write_cd(res, tmp_path / "cd.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# the command


def invoke(*args: str):
    return CliRunner().invoke(app, ["rank", *args])


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory) -> Path:
    """A real sweep: 3 activations x 4 tasks (data x target) x 3 seeds, tiny models."""
    from tests.conftest import TINY

    root = tmp_path_factory.mktemp("rank")
    args = ["sweep", "activation=gelu,relu,tanh", "data=normal,uniform", "data.target=random,teacher",
            "seed=range(3)", *TINY, "epochs=5", "--runs-dir", str(root), "--name", "s"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return root / "s"


def test_command_on_a_sweep(tiny_sweep, tmp_path):
    result = invoke(str(tiny_sweep), "--plot", str(tmp_path / "cd.png"))
    assert result.exit_code == 0, result.output
    assert "mean rank" in result.stdout and "Friedman" in result.stdout and "Cannot be told apart" in result.stdout
    assert (tmp_path / "cd.png").stat().st_size > 1000
    result = invoke(str(tiny_sweep), "--format", "csv", "--output", str(tmp_path / "r.csv"), "--posthoc", "wilcoxon")
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "r.csv")
    assert sorted(table["activation"]) == ["gelu", "relu", "tanh"] and (table["n_tasks"] == 4).all()
    ref = rk.rank(load([tiny_sweep]), "final", posthoc="wilcoxon").table
    np.testing.assert_allclose(table["mean_rank"], ref["mean_rank"])


@pytest.mark.parametrize(("args", "message"), [
    (["--by", "nosuch"], "--by nosuch: no such config column (columns: "),
    (["--task", "nosuch"], "--task nosuch: no such config column"),
    (["--task", "activation"], "that is the compared column"),
    (["--task", "data.target", "--by", "data"], None),  # fine: rank data over targets
    (["--by", "seed", "--task", "activation"], None),
    (["--format", "xml"], "unknown format 'xml'"),
    (["--posthoc", "tukey"], "unknown --posthoc 'tukey'"),
    (["--alpha", "abc"], "--alpha abc: needs a number between 0 and 1"),
    (["--alpha", "1.5"], "--alpha 1.5: needs a number between 0 and 1"),
    (["--metric", "nosuch"], "unknown metric"),
    (["--plot", "{tmp}/cd.gif"], "unknown image type"),
    (["--plot", "{tmp}/no/cd.png"], "does not exist"),
    (["--output", "{tmp}/no/r.csv"], "does not exist"),
])
def test_bad_input_exit_2(tmp_path, args, message):
    path = write_runs(tmp_path / "r.csv")
    result = invoke(str(path), *[a.format(tmp=tmp_path) for a in args])
    if message is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "no").exists() and not (tmp_path / "cd.gif").exists()


def test_single_task_and_single_group(tmp_path):
    df = pd.read_csv(write_runs(tmp_path / "r.csv"))
    df[df["data"] == "normal"].drop(columns="data.target").to_csv(tmp_path / "one.csv", index=False)
    result = invoke(str(tmp_path / "one.csv"))
    assert result.exit_code == 2
    assert "only one task" in result.stderr and "actbench compare" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    df[df["activation"] == "relu"].to_csv(tmp_path / "relu.csv", index=False)
    result = invoke(str(tmp_path / "relu.csv"))
    assert result.exit_code == 2 and "fewer than 2 groups" in result.stderr
    with pytest.raises(UsageError, match="tasks have a result for every activation"):
        path = write_runs(tmp_path / "m.csv", skip={(t, "tanh") for t in range(3)})
        rk.rank(load([path]))


def test_rank_modules_and_the_rank_command_import_no_torch_or_heavy_statistics(tmp_path):
    """One process (each start costs seconds): the modules rank needs imported, then the command run;
    modules only accumulate in sys.modules, so a heavy one from either step fails the check."""
    path = write_runs(tmp_path / "r.csv")
    code = ("import sys, activation_bench.cli.main, activation_bench.analysis.rank, "
            "activation_bench.render.rank_tables, activation_bench.analysis.power; "
            "heavy = {'torch', 'statsmodels', 'scikit_posthocs', 'matplotlib'}; "
            "assert not heavy & set(sys.modules), heavy & set(sys.modules); "
            "from typer.testing import CliRunner; from activation_bench.cli.main import app; "
            f"r = CliRunner().invoke(app, ['rank', {str(path)!r}]); assert r.exit_code == 0, r.output; "
            "assert not heavy & set(sys.modules), heavy & set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_early_stop_ranks_test_loss_by_default(tmp_path):
    # x has the lower training loss everywhere, y the lower test loss at the lowest val_loss epoch
    rows = ["activation,data,seed,epoch,train_loss,val_loss,test_loss"]
    for data in ("a", "b"):
        for seed in (0, 1):
            rows += [f"x,{data},{seed},1,0.1,0.5,0.6", f"x,{data},{seed},2,0.01,0.6,0.7",
                     f"y,{data},{seed},1,0.2,0.4,0.3", f"y,{data},{seed},2,0.02,0.5,0.2"]
    path = tmp_path / "es.csv"
    path.write_text("\n".join(rows) + "\n")
    def first(*extra):
        res = CliRunner().invoke(app, ["rank", str(path), "--metric", "early_stop", "--format", "csv", *extra])
        assert res.exit_code == 0, res.output
        return res.stdout.splitlines()[1].split(",")[0]

    assert first() == "y"  # test_loss at epoch 1 (the lowest val_loss): y 0.3 < x 0.6
    assert first("--loss", "train_loss") == "x"  # train_loss at that epoch: x 0.1 < y 0.2
