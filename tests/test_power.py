"""actbench compare --power: seeds needed and the smallest detectable ratio, checked against
statsmodels' TTestPower on the same paired log10 differences; bad input (exit 2); lazy imports."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from activation_bench.analysis import compare as cmp
from activation_bench.analysis import power as pw
from activation_bench.cli.main import app
from activation_bench.render import tables
from tests.test_compare import FINAL, row, write_long_csv


def test_power_columns_match_statsmodels(tmp_path):
    from statsmodels.stats.power import TTestPower  # here: only these tests need statsmodels

    path = write_long_csv(tmp_path / "r.csv")
    spec = pw.parse_power("1.05")
    res = cmp.compare(cmp.load([path]), "final", baseline="activation=relu", power=spec)
    solver = TTestPower()
    for act in ("gelu", "silu"):
        d = np.log10(FINAL[act]) - np.log10(FINAL["relu"])
        sd = d.std(ddof=1)
        r = row(res, activation=act)
        assert r["sd_diff"] == pytest.approx(sd)
        need = solver.solve_power(effect_size=math.log10(1.05) / sd, alpha=0.05, power=0.8, alternative="two-sided")
        assert r["seeds_needed"] == math.ceil(need)
        d_min = solver.solve_power(nobs=len(d), alpha=0.05, power=0.8, alternative="two-sided")
        assert r["min_detectable_ratio"] == pytest.approx(10 ** (d_min * sd))
        # at that ratio, the current number of pairs has exactly the asked power
        effect = math.log10(r["min_detectable_ratio"]) / sd
        assert solver.power(effect_size=effect, nobs=len(d), alpha=0.05) == pytest.approx(0.8)
    assert pd.isna(row(res, activation="relu")["seeds_needed"])
    assert any("TTestPower" in m for m in res.methods)


def test_power_level_alpha_and_ratio_below_one():
    from statsmodels.stats.power import TTestPower  # here: only these tests need statsmodels

    sd = 0.1
    a = pw.seeds_needed(sd, pw.parse_power("0.9", "0.9", "0.01"))
    need = TTestPower().solve_power(effect_size=math.log10(1 / 0.9) / sd, alpha=0.01, power=0.9)
    assert a == math.ceil(need)
    assert pw.seeds_needed(sd, pw.parse_power(1 / 0.9, "0.9", "0.01")) == a  # 0.9x and 1.11x: the same effect
    assert pw.min_detectable_ratio(sd, 10, pw.parse_power(2)) > pw.min_detectable_ratio(sd, 30, pw.parse_power(2))


def test_power_edge_cases():
    from statsmodels.stats.power import TTestPower  # here: only these tests need statsmodels

    spec = pw.parse_power(1.5)
    assert pw.seeds_needed(1e-6, spec) == 2  # huge effect: the smallest t-test
    assert math.isnan(pw.seeds_needed(0.0, spec)) and math.isnan(pw.seeds_needed(float("nan"), spec))
    assert math.isnan(pw.min_detectable_ratio(0.1, 1, spec)) and math.isnan(pw.min_detectable_ratio(0.0, 5, spec))
    # every answer is the smallest n whose power reaches the target, also where the root finder struggles
    solver = TTestPower()
    for sd in (0.02, 0.05, 0.08, 0.1, 0.3):
        n = int(pw.seeds_needed(sd, spec))
        d = math.log10(1.5) / sd
        assert solver.power(effect_size=d, nobs=n, alpha=0.05) >= 0.8 - 1e-9 or n == 2
        if n > 2:  # statsmodels' power is NaN for some large effects at 2 pairs (scipy's noncentral t)
            below = solver.power(effect_size=d, nobs=n - 1, alpha=0.05)
            assert below < 0.8 or (math.isnan(below) and n == 3)


def test_command_power_columns(tmp_path):
    path = write_long_csv(tmp_path / "r.csv")
    result = CliRunner().invoke(app, ["compare", str(path), "--power", "1.05", "--format", "csv"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(pd.io.common.StringIO(result.stdout))
    assert {"sd_diff", "seeds_needed", "min_detectable_ratio"} <= set(table.columns)
    result = CliRunner().invoke(app, ["compare", str(path), "--power", "1.05"])
    assert result.exit_code == 0 and "seeds for 1.05x" in result.stdout and "min ratio" in result.stdout
    res = cmp.compare(cmp.load([path]), "final", power=pw.parse_power(1.05))
    assert "seeds_needed" in tables.to_json(res) and "seeds for 1.05x" in tables.to_markdown(res)
    plain = CliRunner().invoke(app, ["compare", str(path), "--format", "csv"])
    assert "seeds_needed" not in plain.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--power", "abc"], "--power abc: not a number"),
    (["--power", "-1.05"], "needs a positive ratio"),
    (["--power", "0"], "needs a positive ratio"),
    (["--power", "1"], "other than 1"),
    (["--power", "inf"], "needs a positive ratio"),
    (["--power", "1.05", "--power-level", "1"], "--power-level 1: needs a number between 0 and 1"),
    (["--power", "1.05", "--alpha", "x"], "--alpha x: not a number"),
    (["--power", "1.05", "--metric", "to=0.1"], "--power works on loss metrics"),
    (["--alpha", "0.01"], "give --power RATIO too"),
])
def test_bad_power_exit_2(tmp_path, args, message):
    path = write_long_csv(tmp_path / "r.csv")
    result = CliRunner().invoke(app, ["compare", str(path), *args])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_compare_without_power_imports_no_statsmodels(tmp_path):
    path = write_long_csv(tmp_path / "r.csv")
    code = ("import sys; from typer.testing import CliRunner; from activation_bench.cli.main import app; "
            f"r = CliRunner().invoke(app, ['compare', {str(path)!r}]); assert r.exit_code == 0, r.output; "
            "heavy = {'torch', 'statsmodels', 'scikit_posthocs'} & set(sys.modules); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_seeds_needed_equals_rounded_up_solve_power_over_many_spreads():
    from statsmodels.stats.power import TTestPower  # here: only these tests need statsmodels

    spec = pw.parse_power(1.1)
    sds = np.geomspace(1e-3, 3.0, 60)
    got = pw.seeds_needed_many(sds, spec)
    solver = TTestPower()

    def power(d, n):
        return solver.power(effect_size=d, nobs=n, alpha=0.05)

    checked = 0
    for sd, n in zip(sds, got):
        d = math.log10(1.1) / sd
        assert power(d, n) >= 0.8 or math.isnan(power(d, n))  # enough pairs ...
        assert n == 2 or not power(d, n - 1) >= 0.8  # ... and no fewer (NaN: scipy's noncentral t fails)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            need = solver.solve_power(effect_size=d, alpha=0.05, power=0.8, alternative="two-sided")
        # where statsmodels' root finder lands on a true answer, it is ours rounded up
        if math.isfinite(need) and power(d, math.ceil(need)) >= 0.8 and not power(d, math.ceil(need) - 1) >= 0.8:
            assert n == max(2, math.ceil(need)), (sd, need)
            checked += 1
    assert checked > 40
