"""Verdicts against a margin and anytime-valid sequential judging, checked by simulation (no training).

Thousands of synthetic studies (vectorised numpy): paired differences over seeds with a null effect,
a clear effect, an effect inside the margin and one exactly at it; several comparisons sharing one
baseline; normal, heavy-tailed, skewed and discrete (accuracy) noise. Each study looks after every
seed from the second on and stops at its first decided verdict, the worst case of "look after every
batch". A wrong decision is a verdict against the truth: better or worse against the true sign
(or for no difference), equivalent for an effect at or outside the margin. Its rate must stay at
or below alpha; the same looks with a fixed-n t interval go far above it (the tests would see it).
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.analysis import decisions as dec
from activation_bench.analysis import sequential as sq
from activation_bench.analysis.verdicts import Margin, parse_margin, t_bounds, verdict_of
from activation_bench.cli.main import app
from activation_bench.errors import UsageError
from activation_bench.render import tables
from tests.test_report import leave_figures_undrawn

ALPHA, SIZE, N, STUDIES = 0.05, 0.1, 30, 2000  # margin 0.1 in log10 units (a ratio of 1.26)


def first_verdict(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's verdict at its first decided look (the last look where none is), and that look's n."""
    decided = v != "undecided"
    at = np.where(decided.any(1), decided.argmax(1), v.shape[1] - 1)
    return v[np.arange(len(v)), at], at + 1


def wrong(verdict: np.ndarray, mu: float, size: float = SIZE, higher_is_better: bool = False) -> np.ndarray:
    """Verdicts that contradict a true mean difference mu."""
    better = mu > 0 if higher_is_better else mu < 0
    worse = mu < 0 if higher_is_better else mu > 0
    return (((verdict == "better") & ~better) | ((verdict == "worse") & ~worse)
            | ((verdict == "equivalent") & (abs(mu) >= size)))


def studies(rng: np.random.Generator, mu: float, m: int, noise: str = "normal", n: int = N) -> np.ndarray:
    """STUDIES x m comparisons sharing one baseline, n seeds each: (STUDIES * m, n) paired differences."""
    shape = (STUDIES, m + 1, n)
    if noise == "normal":
        e = rng.normal(0, 0.1, shape)
    elif noise == "t3":  # heavy tails, same spread
        e = rng.standard_t(3, shape) * 0.1 / math.sqrt(3)
    else:  # skewed
        e = (rng.exponential(1.0, shape) - 1) * 0.1
    return (mu + e[:, 1:, :] - e[:, :1, :]).reshape(STUDIES * m, n)


def family_error(d: np.ndarray, mu: float, m: int, **kw) -> tuple[float, np.ndarray, np.ndarray]:
    """Share of studies with any wrong verdict at the stop, the verdicts at the stop and their n."""
    _, _, v = sq.judge(d, SIZE, False, ALPHA / m)
    final, at = first_verdict(v)
    return float(wrong(final, mu, **kw).reshape(-1, m).any(1).mean()), final, at


@pytest.mark.parametrize("mu,noise", [(0.0, "normal"), (-0.3, "normal"), (-0.05, "normal"), (SIZE, "normal"),
                                      (0.0, "t3"), (SIZE, "t3"), (0.0, "skew")])
@pytest.mark.parametrize("m", [1, 3])
def test_wrong_decisions_at_most_alpha_looking_after_every_seed(mu, noise, m):
    rng = np.random.default_rng(zlib.crc32(repr((mu, noise, m)).encode()))
    err, final, at = family_error(studies(rng, mu, m, noise), mu, m)
    # 2000 studies: the binomial standard error at 5% is 0.5 pp; the measured rates are 0-2%
    assert err <= ALPHA, (mu, noise, m, err)
    if mu == -0.3:  # a clear effect (a ratio of 2) is found, early
        assert (final == "better").mean() > 0.99 and np.median(at) <= 10
    if mu == 0.0 and noise == "normal":  # no difference: often shown equivalent, never too early
        first = int(np.argmax(np.isfinite(sq.boundary(np.arange(1, N + 1), ALPHA / m)))) + 1  # 5 seeds, or 6 for 3
        assert (final == "equivalent").mean() > 0.2 and at[final != "undecided"].min() >= first >= 5


def test_peeking_at_a_fixed_n_interval_would_fail_the_same_check():
    """The check has teeth: the fixed-n t interval read after every seed errs far above alpha."""
    rng = np.random.default_rng(7)
    d = studies(rng, 0.0, 1)
    n = np.arange(1, N + 1, dtype=float)
    k, mean, sd = sq.running(d)
    lo, hi = t_bounds(mean, sd, np.broadcast_to(k, d.shape), 1 - ALPHA)
    v = verdict_of(lo, hi, SIZE, False)
    final, _ = first_verdict(v)
    assert wrong(final, 0.0).mean() > 3 * ALPHA
    assert len(n) == N


def test_discrete_accuracy_differences():
    """Accuracies on a 200-example test split (differences in steps of 0.5 pp), margin 1 pp: no effect,
    and a candidate 3 pp better."""
    rng = np.random.default_rng(11)
    for gain, m in ((0.0, 1), (0.03, 2)):
        p = np.clip(rng.normal(0.85, 0.02, (STUDIES, 1, N)), 0, 1)  # the seed's difficulty, shared
        base = rng.binomial(200, p) / 200
        cand = rng.binomial(200, np.clip(p + gain, 0, 1), (STUDIES, m, N)) / 200
        d = (100 * (cand - base)).reshape(-1, N)
        _, _, v = sq.judge(d, 1.0, True, ALPHA / m)
        final, _ = first_verdict(v)
        err = wrong(final, 100 * gain, size=1.0, higher_is_better=True).reshape(-1, m).any(1).mean()
        assert err <= ALPHA
        if gain:
            assert (final == "better").mean() > 0.8  # 90% at 30 seeds (the runs' own binomial noise is large)


def test_boundary_is_where_the_bayes_factor_reaches_one_over_alpha():
    n = np.arange(2, 60)
    b = sq.boundary(n, 0.025)
    finite = np.isfinite(b)
    assert not finite[:4].any() and finite[4:].all()  # with g = 1 no verdict before 6 seeds at 0.025
    assert np.allclose(sq.log_bf(b[finite] ** 2, n[finite]), math.log(40))
    assert np.all(np.diff(b[finite]) < 0)  # narrower with every seed


def test_martingale_under_the_null():
    """E[BF_n] = 1 at the true mean, whatever the spread (a Monte Carlo check at n = 8)."""
    rng = np.random.default_rng(3)
    d = rng.normal(0.0, 5.0, (200_000, 8))
    k, mean, sd = sq.running(d)
    bf = np.exp(sq.log_bf(k[-1] * mean[:, -1] ** 2 / sd[:, -1] ** 2, k[-1]))
    assert abs(bf.mean() - 1) < 0.05


def test_anytime_p_and_running_intersection():
    rng = np.random.default_rng(5)
    d = rng.normal(-0.2, 0.1, 20)
    lo, hi = sq.confidence_sequence(d, ALPHA)
    assert np.all(np.diff(lo[np.isfinite(lo)]) >= 0) and np.all(np.diff(hi[np.isfinite(hi)]) <= 0)
    p = sq.anytime_p(d)
    assert np.all(np.diff(p) <= 0) and p[-1] < 1e-3 and p[0] == 1.0
    assert np.all(sq.anytime_p(np.zeros(8)) == 1.0)  # every pair ties: no evidence of a difference


def test_verdict_rule():
    v = verdict_of(np.array([-0.05, -0.3, 0.2, -0.2, np.nan, -0.01]), np.array([0.05, -0.2, 0.3, 0.05, np.nan, -0.001]),
                   0.1, False)
    assert list(v) == ["equivalent", "better", "worse", "undecided", "undecided", "equivalent"]
    assert list(verdict_of(np.array([0.5]), np.array([2.0]), 1.0, True)) == ["better"]


@pytest.mark.parametrize("text,acc,ok", [("1.05", False, True), ("0.95", False, True), ("1", False, False),
                                         ("-1.05", False, False), ("0", False, False), ("nan", False, False),
                                         ("x", False, False), ("1", True, True), ("-1", True, False),
                                         ("101", True, False)])
def test_parse_margin(text, acc, ok):
    if ok:
        m = parse_margin(text, accuracy=acc)
        assert m.size == pytest.approx(float(text) if acc else abs(math.log10(float(text))))
    else:
        with pytest.raises(UsageError, match="--margin"):
            parse_margin(text, accuracy=acc)


# ---------------------------------------------------------------------------------------------
# on loaded runs: compare's columns, decisions(), the command


def write_runs(path: Path, seeds: int = 12, acc: bool = False) -> Path:
    """A long CSV: relu, gelu clearly better (half the loss), silu equivalent (within 1%), mish noisy."""
    rng = np.random.default_rng(0)
    rows = []
    base = np.exp(rng.normal(0, 0.3, seeds))
    finals = {"relu": base, "gelu": base * 0.5 * np.exp(rng.normal(0, 0.02, seeds)),
              "silu": base * np.exp(rng.normal(0, 0.005, seeds)), "mish": base * np.exp(rng.normal(0, 0.5, seeds))}
    for act, f in finals.items():
        for seed in range(seeds):
            row = {"activation": act, "seed": seed, "epoch": 1, "train_loss": f[seed]}
            if acc:
                row["test_acc"] = float(np.clip(0.9 - 0.1 * np.log(f[seed]) / 3, 0, 1))
            rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_compare_verdicts_and_decisions(tmp_path):
    loaded = cmp.load([write_runs(tmp_path / "r.csv")])
    fixed = cmp.compare(loaded, "final", margin=Margin(1.05))
    t = fixed.table.set_index("activation")
    assert t.loc["gelu", "verdict"] == "better" and t.loc["silu", "verdict"] == "equivalent"
    assert t.loc["relu", "verdict"] == ""  # the baseline
    # the fixed-n interval is the t interval at 1 - alpha/3
    from scipy import stats

    r = t.loc["mish"]
    half = stats.t.ppf(1 - ALPHA / 6, r["n_pairs"] - 1) * r["sd_diff"] / math.sqrt(r["n_pairs"])
    assert r["verdict_ratio_lo"] == pytest.approx(10 ** (r["mean_diff"] - half))
    seq = cmp.compare(loaded, "final", margin=Margin(1.05), sequential=sq.SequentialSpec(12))
    s = seq.table.set_index("activation")
    assert s.loc["gelu", "verdict"] == "better" and s.loc["gelu", "stopped"] == "decided"
    assert s.loc["gelu", "decided_at"] >= 6 and s.loc["gelu", "seeds_used"] == 12
    assert s.loc["mish", "verdict"] == "undecided" and s.loc["mish", "stopped"] == "max seeds"
    assert s.loc["mish", "verdict_ratio_lo"] <= r["verdict_ratio_lo"]  # anytime validity costs width
    got = {d.group["activation"]: d for d in dec.decisions(loaded, "final", None, None, "train_loss", None, "1.05",
                                                            max_seeds=20)}
    assert set(got) == {"gelu", "silu", "mish"} and got["mish"].stopped == "open" and not got["mish"].done
    assert got["gelu"].done and got["gelu"].verdict == "better" and got["gelu"].lo < got["gelu"].estimate < 0.55
    assert got["gelu"].baseline == "activation=relu" and got["gelu"].n == 12
    # a prefix of the seeds gives the verdicts a sweep would have read at that look
    runs = pd.read_csv(tmp_path / "r.csv")
    runs[runs["seed"] < 4].to_csv(tmp_path / "early.csv", index=False)
    early = cmp.load([tmp_path / "early.csv"])
    assert all(d.verdict == "undecided" for d in dec.decisions(early, "final", None, None, "train_loss", None, "1.05"))


def test_accuracy_margin_in_percentage_points(tmp_path):
    loaded = cmp.load([write_runs(tmp_path / "r.csv", acc=True)], "test_acc")
    res = cmp.compare(loaded, "final", loss="test_acc", margin=parse_margin("1", accuracy=True))
    t = res.table.set_index("activation")
    assert t.loc["gelu", "verdict"] == "better" and t.loc["gelu", "verdict_lo_pp"] > 0
    doc = tables.to_json(res)
    assert '"verdict_lo_pp"' in doc and '"unit": "pp"' in doc
    with pytest.raises(UsageError, match="percentage points"):
        cmp.compare(loaded, "final", loss="test_acc", margin=Margin(1.05))


def invoke(*args: str):
    return CliRunner().invoke(app, ["compare", *args])


def test_command_formats(tmp_path):
    path = str(write_runs(tmp_path / "r.csv"))
    for fmt in ("csv", "markdown", "json", "table"):
        out = invoke(path, "--margin", "1.05", "--sequential", "--format", fmt)
        assert out.exit_code == 0, out.output
        assert "equivalent" in out.stdout and "decided" in out.stdout
    md = invoke(path, "--margin", "1.05", "-f", "markdown").stdout
    assert "verdict (1.05x)" in md and "95% CI (all)" in md and "Verdict, margin 1.05x" in md
    plain = invoke(path, "-f", "csv").stdout
    assert "verdict" not in plain  # without --margin, the table as before


@pytest.mark.parametrize("args,message", [
    (["--margin", "-1"], "--margin -1: negative"),
    (["--margin", "1"], "--margin 1"),
    (["--sequential"], "--sequential judges against a margin"),
    (["--margin", "1.05", "--judge-seeds-max", "10"], "give --sequential too"),
    (["--margin", "1.05", "--sequential", "--judge-seeds-max", "1"], "at least 2"),
    (["--margin", "1.05", "--metric", "to=0.5"], "--margin works on loss metrics"),
    (["--margin", "1.05", "--alpha", "2"], "--alpha 2"),
])
def test_bad_input_exit_2(tmp_path, args, message):
    out = invoke(str(write_runs(tmp_path / "r.csv")), *args)
    assert out.exit_code == 2 and message in out.output and out.output.count("\n") <= 1


def test_rank_margin_counts_tasks_practically_tied_with_the_best(tmp_path):
    rows = []
    rng = np.random.default_rng(2)
    for data in ("a", "b", "c"):
        for seed in range(4):
            base = float(np.exp(rng.normal(0, 0.3)))
            for act, f in (("relu", 1.0), ("gelu", 0.5), ("silu", 0.51)):
                rows.append({"activation": act, "data": data, "seed": seed, "epoch": 1, "train_loss": base * f})
    pd.DataFrame(rows).to_csv(tmp_path / "r.csv", index=False)
    out = CliRunner().invoke(app, ["rank", str(tmp_path / "r.csv"), "--margin", "1.05", "-f", "csv"])
    assert out.exit_code == 0, out.output
    got = pd.read_csv(__import__("io").StringIO(out.stdout)).set_index("activation")["within_margin"]
    assert got.to_dict() == {"gelu": 3, "silu": 3, "relu": 0}
    plain = CliRunner().invoke(app, ["rank", str(tmp_path / "r.csv"), "-f", "csv"]).stdout
    assert "within_margin" not in plain
    bad = CliRunner().invoke(app, ["rank", str(tmp_path / "r.csv"), "--margin", "-1"])
    assert bad.exit_code == 2 and "--margin -1: negative" in bad.output


def test_report_margins(tmp_path, monkeypatch):
    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report draws)
    from activation_bench.render import report as rep

    path = write_runs(tmp_path / "r.csv", acc=True)
    assert set(rep.parse_margins(["1.05", "1pp"], None)) == {"log10", "accuracy"}
    assert rep.parse_margins(["2"], "test_acc")["accuracy"].value == 2
    with pytest.raises(UsageError, match="a second margin"):
        rep.parse_margins(["1.05", "1.1"], None)
    out = CliRunner().invoke(app, ["report", str(path), "--margin", "1.05", "--no-shapes", "-o",
                                   str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "r.html").read_text()
    assert "verdict (1.05x)" in page and "Verdicts against a margin of 1.05x: 1 better, 1 equivalent" in page
    bad = CliRunner().invoke(app, ["report", str(path), "--margin", "-1pp", "-o", str(tmp_path / "b.html")])
    assert bad.exit_code == 2 and "negative" in bad.output and not (tmp_path / "b.html").exists()


STUDY = """\
sweeps:
  iris:
    grid: ['activation=gelu,relu', 'seed=range(3)']
    overrides: [data=iris, epochs=2, model.hidden_dim=4]
comparisons:
  acc: {sweeps: [iris], loss: test_acc, margin: MARGIN}
"""


@pytest.mark.parametrize("margin,message", [("-1", "comparisons.acc.margin: negative"),
                                            ("x", "comparisons.acc.margin: not a number")])
def test_study_comparison_margin(tmp_path, monkeypatch, margin, message):
    from activation_bench.study import loading

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.yaml").write_text(STUDY.replace("MARGIN", "1"), encoding="utf-8")
    assert loading.load(tmp_path / "ok.yaml").spec.comparisons["acc"].margin == "1"
    (tmp_path / "s.yaml").write_text(STUDY.replace("MARGIN", margin), encoding="utf-8")
    out = CliRunner().invoke(app, ["study", "run", "s.yaml", "--dry-run"])
    assert out.exit_code == 2, out.output
    assert message in out.output and not (tmp_path / "runs").exists()


def test_decisions_of_a_tuned_comparison(tmp_path):
    """With tune: the choice on the tuning seeds, the verdict on the judging seeds at the chosen value."""
    from activation_bench.analysis.tune import TuneSpec

    rng = np.random.default_rng(4)
    rows = []
    for seed in range(12):
        base = float(np.exp(rng.normal(0, 0.2)))
        for act, lrs in (("relu", {"0.01": 1.0, "0.1": 2.0}), ("gelu", {"0.01": 3.0, "0.1": 0.5})):
            for lr, f in lrs.items():
                loss = base * f * float(np.exp(rng.normal(0, 0.01)))
                rows += [{"activation": act, "lr": lr, "seed": seed, "epoch": e, "train_loss": loss * (3 - e),
                          "val_loss": loss * (3 - e)} for e in (1, 2)]
    pd.DataFrame(rows).to_csv(tmp_path / "r.csv", index=False)
    loaded = cmp.load([tmp_path / "r.csv"], "val_loss")
    (d,) = dec.decisions(loaded, "final", ["activation"], None, "val_loss", TuneSpec(("lr",), tune_seeds=3), "1.1",
                        max_seeds=9)
    assert d.group == {"activation": "gelu"} and d.tuned == {"lr": "0.1"}
    assert d.verdict == "better" and d.n == 9 and d.stopped == "decided" and 0.45 < d.estimate < 0.55


def test_compare_reads_a_sequential_sweeps_record(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    write_runs(sweep / "results.csv")
    plain = invoke(str(sweep), "-f", "csv")
    assert plain.exit_code == 0, plain.output
    assert "verdict" not in plain.stdout
    (sweep / sq.RECORD_FILE).write_text(sq.record_text(Margin(1.05), 0.05, 12, 4), encoding="utf-8")
    got = pd.read_csv(__import__("io").StringIO(invoke(str(sweep), "-f", "csv").stdout)).set_index("activation")
    assert got.loc["gelu", "stopped"] == "decided" and got.loc["mish", "stopped"] == "max seeds"
    assert got.loc["silu", "verdict"] == "equivalent" and got.loc["gelu", "seeds_used"] == 12
    wider = invoke(str(sweep), "-f", "markdown", "--margin", "1.5").stdout  # the user's margin, still anytime-valid
    assert "verdict (1.5x)" in wider and "anytime 95% CI" in wider
    (sweep / sq.RECORD_FILE).write_text("{", encoding="utf-8")
    bad = invoke(str(sweep))
    assert bad.exit_code == 2 and "not a sequential judging record" in bad.output


def test_report_of_a_sequential_sweep(tmp_path, monkeypatch):
    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report draws)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    write_runs(sweep / "results.csv")
    (sweep / sq.RECORD_FILE).write_text(sq.record_text(Margin(1.05), 0.05, 12, 4), encoding="utf-8")
    out = CliRunner().invoke(app, ["report", str(sweep), "--no-shapes", "-o", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "r.html").read_text()
    assert "anytime 95% CI" in page and "Verdicts (anytime-valid) against a margin of 1.05x" in page


def test_report_of_a_sequential_classification_sweep_keeps_its_accuracy_tables(tmp_path, monkeypatch):
    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report draws)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    write_runs(sweep / "results.csv", acc=True)
    (sweep / sq.RECORD_FILE).write_text(sq.record_text(Margin(1.05), 0.05, 12, 4), encoding="utf-8")
    out = CliRunner().invoke(app, ["report", str(sweep), "--no-shapes", "-o", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "r.html").read_text()
    assert "test_acc" in page and "anytime 95% CI" in page


def test_alpha_applies_to_a_recorded_sequential_judging(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    write_runs(sweep / "results.csv")
    (sweep / sq.RECORD_FILE).write_text(sq.record_text(Margin(1.05), 0.05, 12, 4), encoding="utf-8")
    out = invoke(str(sweep), "--alpha", "0.01", "-f", "json")
    assert out.exit_code == 0, out.output
    assert '"alpha": 0.01' in out.stdout and '"interval": "confidence sequence"' in out.stdout
