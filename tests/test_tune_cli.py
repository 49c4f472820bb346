"""compare/rank/report/plot with --tune on small hand-made loss tables (no training), checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from activation_bench.cli.main import app
from tests.test_report import leave_figures_undrawn

LRS = ("0.001", "0.01", "0.1")
BEST = {"relu": "0.01", "gelu": "0.1"}  # each activation's best lr on the tuning seeds' val_loss
SCALE = {"relu": 0.2, "gelu": 0.1}


def held_out(act: str, lr: str, seed: int) -> float:
    """The test loss at the early-stopping epoch (epoch 3, where val_loss is lowest)."""
    return SCALE[act] * (1 + 0.01 * seed) if lr == BEST[act] else 1.0 + 0.01 * seed


def write_table(path: Path, seeds: int = 6, tasks: tuple[str, ...] = ("a",), drop: tuple = (),
                val: bool = True, leak: bool = False) -> Path:
    """activation x data x lr x seed, epochs 1-3. val_loss falls every epoch, lowest at epoch 3:
    0.1 at the activation's best lr, 0.5 elsewhere. leak=True: on the evaluation seeds (>= 2) the
    val_loss points at the smallest lr instead, so a selection that looked at them would differ."""
    head = "activation,data,lr,seed,epoch,train_loss" + (",val_loss,test_loss" if val else "")
    rows = [head]
    for data in tasks:
        for act in ("relu", "gelu"):
            for lr in LRS:
                if (act, data, lr) in drop:
                    continue
                for seed in range(seeds):
                    good = lr == BEST[act] if not (leak and seed >= 2) else lr == "0.001"
                    v = 0.1 if good else 0.5
                    t = held_out(act, lr, seed)
                    for e in (1, 2, 3):
                        f = 1 + 0.1 * (3 - e)
                        extra = f",{v * f!r},{t * f!r}" if val else ""
                        train = (0.05 if lr == BEST[act] else 0.3) * f * (1 + 0.01 * seed)
                        rows.append(f"{act},{data},{lr},{seed},{e},{train!r}{extra}")
    path.write_text("\n".join(rows) + "\n")
    return path


def invoke(*args: str):
    return CliRunner().invoke(app, [*args])


def geo(values: list[float]) -> float:
    return float(10 ** np.mean(np.log10(values)))


def compare_json(*args: str) -> dict:
    result = invoke("compare", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_compare_tune_by_hand(tmp_path):
    csv = write_table(tmp_path / "r.csv", leak=True)
    doc = compare_json(str(csv), "--metric", "early_stop", "--tune", "lr", "--baseline", "activation=relu")
    assert doc["tuning"]["tune_seeds"] == ["0", "1"]  # ceil(6 / 3) = 2 smallest seeds
    assert doc["tuning"]["eval_seeds"] == ["2", "3", "4", "5"]
    assert doc["tuning"]["keys"] == ["lr"] and doc["tuning"]["grid"] == {"lr": list(LRS)}
    assert doc["group_columns"] == ["activation"] and "lr" not in doc["pair_columns"]
    rows = {r["activation"]: r for r in doc["rows"]}
    assert len(doc["rows"]) == 2
    for act in ("relu", "gelu"):
        r = rows[act]
        assert r["lr"] == BEST[act]  # chosen on seeds 0-1 although seeds 2-5 point at 0.001
        assert r["n"] == 4 and r["tune_n"] == 2
        assert r["tune_score"] == pytest.approx(-1.0)  # log10 of the lowest val_loss, 0.1
        assert r["geo_mean"] == pytest.approx(geo([held_out(act, BEST[act], s) for s in range(2, 6)]))
    want = geo([held_out("gelu", "0.1", s) / held_out("relu", "0.01", s) for s in range(2, 6)])
    assert rows["gelu"]["ratio"] == pytest.approx(want) and rows["gelu"]["n_pairs"] == 4
    assert "chosen lr=0.1, the grid's largest value, for activation=gelu: widen the grid" in doc["warnings"]
    assert any("first value in grid order" in m for m in doc["methods"])


def test_the_table_marks_a_chosen_value_at_the_grids_edge(tmp_path):
    csv = write_table(tmp_path / "r.csv", leak=True)
    result = invoke("compare", str(csv), "--metric", "early_stop", "--tune", "lr", "--baseline", "activation=relu")
    assert result.exit_code == 0, result.output
    lines = {ln.split()[0]: ln for ln in result.stdout.splitlines() if ln.strip().startswith(("relu", "gelu"))}
    assert "0.1 (grid max)" in lines["gelu"]  # BEST: gelu chose the largest lr
    assert f"{BEST['relu']} " in lines["relu"] and "(grid" not in lines["relu"]
    assert "ratio 95% CI" in result.stdout


def test_with_own_grids_the_table_marks_the_end_of_each_groups_own_grid(tmp_path):
    """relu has no runs at lr 0.1: its own grid is 0.001, 0.01, and its choice 0.01 is that grid's
    largest value (inside the grid both groups share), as the warning says."""
    csv = write_table(tmp_path / "r.csv", leak=True, drop=(("relu", "a", "0.1"),))
    result = invoke("compare", str(csv), "--metric", "early_stop", "--tune", "lr", "--tune-grid", "own",
                    "--baseline", "activation=relu")
    assert result.exit_code == 0, result.output
    lines = {ln.split()[0]: ln for ln in result.stdout.splitlines() if ln.strip().startswith(("relu", "gelu"))}
    assert "0.01 (grid max)" in lines["relu"] and "0.1 (grid max)" in lines["gelu"]
    assert "chosen lr=0.01, the largest value of its own grid, for activation=relu" in result.stderr


def test_compare_tune_csv_has_a_column_per_tuned_key(tmp_path):
    csv = write_table(tmp_path / "r.csv", tasks=("a", "b"))
    result = invoke("compare", str(csv), "--metric", "early_stop", "--tune", "lr", "--tune-seeds", "3", "-f", "csv")
    assert result.exit_code == 0, result.output
    head, *lines = result.stdout.strip().splitlines()
    cols = head.split(",")
    assert cols[:4] == ["activation", "data", "lr", "metric"] and "tune_n" in cols
    assert len(lines) == 4  # one row per activation x data
    n, tune_n = cols.index("n"), cols.index("tune_n")
    assert {(ln.split(",")[n], ln.split(",")[tune_n]) for ln in lines} == {("3", "3")}


def test_group_missing_a_grid_value_is_left_out(tmp_path):
    csv = write_table(tmp_path / "r.csv", tasks=("a", "b"), drop=(("gelu", "b", "0.1"),))
    doc = compare_json(str(csv), "--metric", "early_stop", "--tune", "lr")
    groups = {(r["activation"], r["data"]) for r in doc["rows"]}
    assert groups == {("relu", "a"), ("gelu", "a"), ("relu", "b")}
    assert doc["tuning"]["left_out"] == ["activation=gelu, data=b"]
    assert any(w.startswith("activation=gelu, data=b: no tuning run with lr=0.1") for w in doc["warnings"])


def test_tune_grid_own_keeps_a_group_with_its_own_values(tmp_path):
    # gelu on task b was run without lr 0.1: --tune-grid own tunes it over 0.001 and 0.01
    csv = write_table(tmp_path / "r.csv", tasks=("a", "b"), drop=(("gelu", "b", "0.1"),))
    for command in ("compare", "rank"):
        args = [command, str(csv), "--metric", "early_stop", "--tune", "lr", "--tune-grid", "own", "-f", "json"]
        result = invoke(*args)
        assert result.exit_code == 0, result.output
    doc = compare_json(str(csv), "--metric", "early_stop", "--tune", "lr", "--tune-grid", "own")
    chosen = {(r["activation"], r["data"]): r["lr"] for r in doc["rows"]}
    assert chosen == {("relu", "a"): "0.01", ("gelu", "a"): "0.1", ("relu", "b"): "0.01", ("gelu", "b"): "0.001"}
    assert doc["tuning"]["left_out"] == [] and doc["tuning"]["own_grid"] is True
    own = next(w for w in doc["warnings"] if w.startswith("each group tuned over its own grid"))
    assert "activation=gelu, data=b: lr 0.001, 0.01 |" in own + " |"
    edge = "chosen lr=0.1, the largest value of its own grid, for activation=gelu, data=a: widen the grid"
    assert edge in doc["warnings"]


def test_without_val_loss_selects_on_train_loss(tmp_path):
    csv = write_table(tmp_path / "r.csv", val=False)
    doc = compare_json(str(csv), "--metric", "final", "--tune", "lr")
    assert doc["tuning"]["selected_on"] == "train_loss"
    assert {r["activation"]: r["lr"] for r in doc["rows"]} == BEST
    assert any("selected on train_loss" in w for w in doc["warnings"])


def test_power_on_a_tuned_comparison(tmp_path):
    csv = write_table(tmp_path / "r.csv", seeds=9)
    doc = compare_json(str(csv), "--metric", "early_stop", "--tune", "lr", "--power", "1.05")
    gelu = next(r for r in doc["rows"] if r["activation"] == "gelu")
    assert gelu["n_pairs"] == 6 and "seeds_needed" in gelu and "min_detectable_ratio" in gelu


def test_rank_tune(tmp_path):
    csv = write_table(tmp_path / "r.csv", tasks=("a", "b", "c"))
    result = invoke("rank", str(csv), "--metric", "early_stop", "--tune", "lr", "-f", "csv")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[1].startswith("gelu,1.0,3,")  # tuned, gelu (0.1x) beats relu (0.2x) on every task
    fixed = invoke("rank", str(csv), "--metric", "early_stop", "--task", "data,lr", "-f", "csv")
    assert fixed.exit_code == 0, fixed.output


def test_report_tuning_section(tmp_path, monkeypatch):
    leave_figures_undrawn(monkeypatch)  # the page's sections and figures' labels are read, not their drawing
    csv = write_table(tmp_path / "r.csv", tasks=("a", "b", "c"))
    out = tmp_path / "rep.html"
    result = invoke("report", str(csv), "--tune", "lr", "--baseline", "activation=relu", "--no-shapes", "-o", str(out))
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert 'id="tuning"' in page and "Tuning budget" in page and 'aria-label="sensitivity-lr"' in page
    assert "--tune lr" in page  # the command in the provenance
    assert 'id="ranking"' in page


def test_plot_x(tmp_path):
    csv = write_table(tmp_path / "r.csv", tasks=("a", "b"))
    out = tmp_path / "lr.svg"
    result = invoke("plot", str(csv), "--x", "lr", "-o", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "<svg" in text and "early_stop of test_loss against lr" in text


@pytest.mark.parametrize(("args", "message"), [
    (["compare", "{csv}", "--tune", "epochs"], "--tune epochs: 'epochs' was not swept"),
    (["compare", "{csv}", "--tune", "seed"], "--tune seed"),
    (["compare", "{csv}", "--tune", "lr", "--tune-seeds", "5"], "leave 1 to evaluate on"),
    (["compare", "{csv}", "--tune", "lr", "--by", "activation,lr"], "--tune lr and --by lr"),
    (["compare", "{csv}", "--tune-seeds", "2"], "--tune-seeds sets up --tune"),
    (["compare", "{csv}", "--tune", "lr", "--tune-grid", "each"], "--tune-grid each: valid: shared, own"),
    (["report", "{csv}", "--tune-grid", "own", "-o", "{tmp}/r.html"], "--tune-grid sets up --tune"),
    (["rank", "{csv}", "--tune", "lr", "--by", "lr"], "--tune lr and --by lr"),
    (["rank", "{csv}", "--tune", "lr", "--task", "data,lr"], "--tune lr and --task lr"),
    (["rank", "{csv}", "--tune", "seed"], "--tune seed"),
    (["report", "{csv}", "--tune", "seed", "-o", "{tmp}/r.html"], "--tune seed"),
    (["report", "{csv}", "--tune", "nosuch", "-o", "{tmp}/r.html"], "'nosuch' was not swept"),
    (["plot", "{csv}", "--x", "seed", "-o", "{tmp}/p.png"], "--x seed"),
    (["plot", "{csv}", "--x", "data", "-o", "{tmp}/p.png"], "is not a number"),
    (["plot", "{csv}", "--metric", "final", "-o", "{tmp}/p.png"], "give --x KEY too"),
])
def test_bad_input_exit_2(tmp_path, args, message):
    csv = write_table(tmp_path / "r.csv", tasks=("a", "b"))
    result = invoke(*[a.format(csv=csv, tmp=tmp_path) for a in args])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "p.png").exists()


def test_single_value_sweeps_keep_their_fixed_value(tmp_path):
    """Sweeps at one lr each: results.csv has no lr column, the sweep.yaml override supplies it."""
    lines = write_table(tmp_path / "all.csv").read_text().splitlines()
    head = lines[0].split(",")
    keep = [i for i, c in enumerate(head) if c not in ("lr", "data")]
    for lr in LRS:
        d = tmp_path / f"sweep-{lr}"
        d.mkdir()
        rows = [r.split(",") for r in lines[1:] if r.split(",")[2] == lr]
        text = [",".join(head[i] for i in keep)] + [",".join(r[i] for i in keep) for r in rows]
        (d / "results.csv").write_text("\n".join(text) + "\n")
        (d / "sweep.yaml").write_text(f"overrides:\n- activation=relu,gelu\n- lr={lr}\n- data=a\n- seed=range(6)\n")
    doc = compare_json(*[str(tmp_path / f"sweep-{lr}") for lr in LRS], "--metric", "early_stop", "--tune", "lr")
    assert {r["activation"]: r["lr"] for r in doc["rows"]} == BEST
    assert doc["tuning"]["grid"] == {"lr": list(LRS)}


def test_tuning_that_leaves_out_the_baseline_or_every_group_says_why(tmp_path):
    """relu lacks lr 0.1 (the grid's other group has it): left out, and as the baseline the error says
    so instead of 'no runs'; with both groups lacking a value nothing is left to compare."""
    csv = write_table(tmp_path / "r.csv", drop=(("relu", "a", "0.1"),))
    result = invoke("compare", str(csv), "--metric", "early_stop", "--tune", "lr", "--baseline", "activation=relu")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --baseline activation=relu: left out by the tuning: activation=relu: no tuning run with lr=0.1 "
        "(the grid's other groups have it): left out, not tuned over fewer values; --tune-grid own tunes each "
        "group over the values its own runs have")
    csv = write_table(tmp_path / "r2.csv", drop=(("relu", "a", "0.1"), ("gelu", "a", "0.001")))
    result = invoke("compare", str(csv), "--metric", "early_stop", "--tune", "lr")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --tune: every group was left out: activation=relu: no tuning run with "
                                    "lr=0.1") and "(and 1 more groups); --tune-grid own" in result.stderr
    assert invoke("compare", str(csv), "--metric", "early_stop", "--tune", "lr", "--tune-grid", "own").exit_code == 0
