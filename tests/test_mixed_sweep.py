"""One sweep over registered activations and expressions ('activation=relu,gelu,expr' with
'activation.fn=...'): which members it holds, their labels, resume, re-runs of a member's config,
compare across the groups, the refusals, and docs/sweeps.md's example."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose_many
from activation_bench.config.hashing import config_hash
from activation_bench.runs import orchestrate
from tests.conftest import TINY, files_under, run_doc_block

FNS = 'activation.fn="x*sigmoid(x)","sin(x)*x"'
MIXED = ["activation=relu,gelu,expr", FNS, "seed=range(2)"]
GROUPS = ["relu", "gelu", "x*sigmoid(x)", "sin(x)*x"]


def _sweep(runner, runs_dir: Path, *args: str):
    return runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "-q", *args])


def test_members_are_each_activation_once_per_seed(tmp_path):
    p = orchestrate.plan([*MIXED, *TINY], tmp_path, "m")
    assert p.keys == ["activation", "seed"]
    assert [(lab["activation"], lab["seed"]) for lab in p.labels] == [(g, str(s)) for g in GROUPS for s in range(2)]
    relu = [m for m, lab in zip(p.members, p.labels) if lab["activation"] == "relu"]
    assert all(not any(o.startswith("activation.fn") for o in m) for m in relu)
    # each member is the config a sweep of its own activation gives: same hash, so same results
    alone = [[f"activation={g}"] if g in ("relu", "gelu") else ["activation=expr", f'activation.fn="{g}"']
             for g in GROUPS]
    cfgs = compose_many([[*a, f"seed={s}", *TINY] for a in alone for s in range(2)])
    assert p.hashes == [config_hash(c) for c in cfgs]
    assert len(set(p.hashes)) == 8


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """The mixed sweep at TINY sizes, run once for the tests below (which leave it as they found it)."""
    from typer.testing import CliRunner

    runs_dir = tmp_path_factory.mktemp("mixed") / "runs"
    result = _sweep(CliRunner(), runs_dir, "--name", "m", *MIXED, *TINY)
    assert result.exit_code == 0, result.output
    return runs_dir / "m"


def test_sweep_files_hold_one_activation_column(mixed):
    doc = yaml.safe_load((mixed / "sweep.yaml").read_text())
    assert doc["keys"] == ["activation", "seed"] and len(doc["members"]) == 8
    header, *rows = (mixed / "results.csv").read_text().splitlines()
    assert header.split(",")[:3] == ["activation", "seed", "run"]
    assert sorted({r.split(",")[0] for r in rows}) == sorted(GROUPS)
    assert len(rows) == 8 * 4  # 4 epochs each
    # a launcher job rebuilds the same plan from sweep.yaml
    loaded = orchestrate.load_plan(mixed)
    assert loaded.labels == [dict(m["labels"]) for m in doc["members"]]
    assert loaded.hashes == [m["config_hash"] for m in doc["members"]]


def test_resume_skips_finished_members(runner, mixed):
    results = (mixed / "results.csv").read_text()
    runs_dir = mixed.parent
    again = _sweep(runner, runs_dir, "--name", "m", *MIXED, *TINY)
    assert again.exit_code == 0 and "8 finished members skipped, 0 to run" in again.output
    assert (mixed / "results.csv").read_text() == results
    # a member lost is the only one run again, and comes back bit for bit
    lost = sorted(mixed.glob("0005_*"))[0]
    losses = (lost / "losses.csv").read_bytes()
    shutil.rmtree(lost)
    dry = _sweep(runner, runs_dir, "--name", "m", "--dry-run", *MIXED, *TINY)
    assert dry.exit_code == 0 and "8 members, 1 to run" in dry.output
    assert _sweep(runner, runs_dir, "--name", "m", *MIXED, *TINY).exit_code == 0
    assert (lost / "losses.csv").read_bytes() == losses
    assert (mixed / "results.csv").read_text() == results


def test_every_member_config_reruns_bitwise(runner, mixed, runs_dir):
    members = sorted(mixed.glob("0*"))
    assert len(members) == 8
    for member in members:
        out = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", "--name", member.name,
                                  "--config", str(member / "config.yaml")])
        assert out.exit_code == 0, out.output
        assert (runs_dir / member.name / "losses.csv").read_bytes() == (member / "losses.csv").read_bytes()


def test_compare_pairs_every_group_with_relu(runner, mixed):
    out = runner.invoke(app, ["compare", str(mixed), "--baseline", "activation=relu", "--format", "json"])
    assert out.exit_code == 0, out.output
    table = json.loads(out.stdout)
    assert table["group_columns"] == ["activation"]
    rows = {row["activation"]: row for row in table["rows"]}
    assert sorted(rows) == sorted(GROUPS) and rows["relu"]["is_baseline"]
    assert all(rows[g]["n_pairs"] == 2 for g in GROUPS[1:])
    # the losses differ between the functions: the groups are not one function four times
    assert len({rows[g]["geo_mean"] for g in GROUPS}) == 4


def test_rank_across_tasks_ranks_each_function(runner, runs_dir):
    args = ["--name", "r", "activation=relu,expr", FNS, "data=normal,uniform", "seed=0,1", *TINY]
    assert _sweep(runner, runs_dir, *args).exit_code == 0
    out = runner.invoke(app, ["rank", str(runs_dir / "r"), "--format", "json"])
    assert out.exit_code == 0, out.output
    table = json.loads(out.stdout)
    assert table["by"] == "activation" and table["tasks"] == ["data=normal", "data=uniform"]
    assert sorted(row["activation"] for row in table["rows"]) == sorted(["relu", *GROUPS[2:]])
    assert all(row["n_tasks"] == 2 for row in table["rows"])


def test_a_key_only_some_activations_take_joins_their_label(runner, runs_dir, tmp_path):
    p = orchestrate.plan(["activation=relu,leaky_relu", "activation.negative_slope=0.01,0.1", *TINY], tmp_path, "l")
    assert p.keys == ["activation"]
    assert [lab["activation"] for lab in p.labels] == ["relu", "leaky_relu:negative_slope=0.01",
                                                       "leaky_relu:negative_slope=0.1"]
    assert [c.activation.get("negative_slope") for c in p.cfgs] == [None, 0.01, 0.1]
    args = ["--name", "b", "activation=relu,expr", 'activation.fn="x*sigmoid(beta*x)"', "+activation.beta=1.5",
            "activation.learnable=false,true", "seed=0,1", *TINY]
    assert _sweep(runner, runs_dir, *args).exit_code == 0
    out = runner.invoke(app, ["compare", str(runs_dir / "b"), "--baseline", "activation=relu", "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = {row["activation"]: row for row in json.loads(out.stdout)["rows"]}
    assert set(rows) == {"relu", "x*sigmoid(beta*x):learnable=false", "x*sigmoid(beta*x):learnable=true"}
    assert [rows[k]["n_pairs"] for k in sorted(rows) if k != "relu"] == [2, 2]
    learned = [yaml.safe_load((d / "config.yaml").read_text())["activation"]
               for d in sorted((runs_dir / "b").glob("0*"))]
    assert [a.get("learnable") for a in learned] == [None, None, False, False, True, True]
    assert [a.get("beta") for a in learned] == [None, None, 1.5, 1.5, 1.5, 1.5]


@pytest.mark.parametrize(("args", "message"), [
    (["activation=relu,gelu", 'activation.fn="x"'],
     "none of the swept activations (relu, gelu) takes activation.fn (activation.fn is for activation=expr"),
    (["activation=relu,gelu", "activation.negative_slope=0.1,0.2"],
     "none of the swept activations (relu, gelu) takes activation.negative_slope"),
    (["activation=relu,expr"], "activation.fn is empty"),
    (["activation=relu,expr", 'activation.fn="x","1/x"'], "is not finite on the probe points"),
    (["activation=relu,expr", 'activation.fn="x"', "+activation.beta=1.0"],
     "activation.beta is not a parameter of activation.fn"),
    (["activation=relu,expr", 'activation.fn="x"', "--memory-mb", "0.001"], "more than the budget"),
])
def test_refusals_exit_2_and_write_nothing(runner, runs_dir, args, message):
    result = _sweep(runner, runs_dir, *args, "seed=0,1", *TINY)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err
    assert files_under(runs_dir) == []


def test_pure_sweeps_keep_their_members_and_labels(tmp_path):
    """Sweeps that mix nothing are as before: activation.* keys every listed activation takes stay
    columns, and an expression sweep is labelled by its text."""
    p = orchestrate.plan(["activation=leaky_relu", "activation.negative_slope=0.01,0.1", "seed=0,1", *TINY],
                         tmp_path, "a")
    assert p.keys == ["activation.negative_slope", "seed"] and len(p.members) == 4
    p = orchestrate.plan(["activation=expr", FNS, "seed=0,1", *TINY], tmp_path, "b")
    assert p.keys == ["activation", "seed"] and [lab["activation"] for lab in p.labels] == [
        "x*sigmoid(x)", "x*sigmoid(x)", "sin(x)*x", "sin(x)*x"]


# ---------------------------------------------------------------------------------------------
# docs/sweeps.md's example

DOC = Path(__file__).resolve().parents[1] / "docs" / "sweeps.md"
SECTION = "## Registered activations and expressions in one sweep"


def run_doc_example(runner, tmp_path: Path, shorten: bool) -> str:
    short = {"seed=range(10)": "seed=range(3)", "epochs=150": "epochs=3"} if shorten else {}
    return run_doc_block(runner, tmp_path, DOC, SECTION, short)


def test_doc_example_runs_shortened(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = run_doc_example(runner, tmp_path, shorten=True)
    for group in GROUPS:
        assert re.search(rf"^\s+{re.escape(group)}\s+3\s", out, re.M), group
    assert "baseline" in out


@pytest.mark.slow
def test_doc_example_runs_as_written(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = run_doc_example(runner, tmp_path, shorten=False)
    shown = DOC.read_text(encoding="utf-8").split(SECTION, 1)[1].split("```console\n", 1)[1]
    for line in shown.split("```", 1)[0].strip().splitlines()[1:]:
        name, n, geo, ci, ratio = line.split()[:5]
        cells = [re.escape(c) for c in (name, n, geo, ci, ratio)]
        assert re.search(r"\s+".join(cells), out), line
