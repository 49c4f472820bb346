"""benchmarks/ as one package with one harness (docs/performance.md): every module imports without
side effects, the harness's interleaved timer and record writer work on trivial paths, and
`python -m benchmarks.render` builds the table of current figures from records, the one in
docs/performance.md included. No benchmark is run here and no time is asserted."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import pkgutil
import sys
from pathlib import Path

import pytest

import benchmarks
from benchmarks import harness, records, render

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(m.name for m in pkgutil.walk_packages(benchmarks.__path__, "benchmarks."))
NEEDS = {"benchmarks.peers.jax_peer": "jax"}  # the [bench] extra's


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports_without_side_effects(name, tmp_path, monkeypatch, capsys):
    if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
        pytest.skip(f"{NEEDS[name]} is not installed (the [bench] extra)")
    monkeypatch.setenv(records.ENV, str(tmp_path / "records"))
    monkeypatch.chdir(tmp_path)
    argv = list(sys.argv)
    importlib.reload(importlib.import_module(name))
    assert capsys.readouterr() == ("", "")
    assert sys.argv == argv and list(tmp_path.iterdir()) == []


def test_the_package_has_no_path_edits_and_no_script_imports_another():
    """Shared code lives in the harness modules; a benchmark imports none of the other benchmarks."""
    shared = {"harness", "provenance", "records", "roofline", "plain", "mnist1d", "tables", "peers"}
    for path in [*ROOT.joinpath("benchmarks").rglob("*.py"), *ROOT.joinpath("tools").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        assert "sys.path" not in text, path
        for line in text.splitlines():
            if line.startswith("from benchmarks import "):
                names = {n.strip() for n in line.removeprefix("from benchmarks import ").split(",")}
                assert names <= shared, (path, line)
            elif line.startswith("from benchmarks."):
                assert line.split()[1].split(".")[1] in shared, (path, line)


def test_every_benchmark_keeps_a_record():
    """Each runnable module of benchmarks/ (render and the peers aside) is a harness.Bench invocation,
    itself or through mnist1d's, so its figures end in a record."""
    mains = [p for p in ROOT.joinpath("benchmarks").glob("*.py")
             if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8") and p.stem != "render"]
    assert len(mains) >= 18
    for path in mains:
        text = path.read_text(encoding="utf-8")
        assert "harness.Bench(" in text or "mnist1d.sweep_vs_plain(" in text, path


def test_interleaved_rounds_take_every_path_in_turn():
    calls = []

    def path(name: str):
        def timed(r: int) -> float:
            calls.append((r, name))
            return harness.clock(sum, range(10))[0]
        return timed

    times = harness.interleaved({"a": path("a"), "b": path("b")}, 3, show=False)
    assert calls == [(1, "a"), (1, "b"), (2, "a"), (2, "b"), (3, "a"), (3, "b")]
    assert [len(v) for v in times.values()] == [3, 3] and min(times["a"] + times["b"]) >= 0
    assert harness.ratios([2.0, 6.0], [1.0, 3.0]) == [2.0, 2.0]
    seconds, result = harness.clock(sorted, [3, 1, 2])
    assert result == [1, 2, 3] and seconds >= 0


def test_a_process_is_timed_whole_and_a_failure_says_which():
    timed = harness.run([sys.executable, "-c", "print(41 + 1)"], capture=True)
    assert timed.stdout.strip() == "42" and timed.seconds > 0 and timed.cpu >= 0
    with pytest.raises(SystemExit, match="failed \\(exit 3\\)"):
        harness.run([sys.executable, "-c", "import sys; sys.exit(3)"])


def bench_record(tmp_path: Path, capsys) -> dict:
    args = argparse.Namespace(records=str(tmp_path), no_record=False)
    bench = harness.Bench(args)
    bench.figure("peer / actbench, whole process", [1.2, 0.9, 1.1], goal=">= 1.0")
    bench.figure("share of bmm's rate", [0.5], unit="")
    bench.note(stack=240)
    rec = bench.finish({"actbench": [1.0, 2.0, 1.5], "peer": [1.2, 1.8, 1.65]})
    out = capsys.readouterr().out
    assert out.startswith("# ") and ", commit " in out.splitlines()[0]
    assert "peer / actbench, whole process = 1.10x (median of 3: 1.20, 0.90, 1.10); goal >= 1.0: met" in out
    return rec


def test_a_record_is_appended_to_its_machines_file(tmp_path, capsys):
    rec = bench_record(tmp_path, capsys)
    path = tmp_path / f"{rec['machine']['slug']}.jsonl"
    bench_record(tmp_path, capsys)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == rec
    assert {"benchmark", "argv", "date", "commit", "dirty", "machine", "versions", "threads", "load", "seconds",
            "figures", "notes"} <= set(rec)
    assert rec["seconds"]["peer"] == [1.2, 1.8, 1.65] and rec["notes"] == {"stack": 240}
    assert rec["figures"][0] == {"name": "peer / actbench, whole process", "ratio": 1.1, "rounds": [1.2, 0.9, 1.1],
                                 "unit": "x", "goal": ">= 1.0", "met": True}
    assert rec["versions"]["python"] and rec["machine"]["cores"] >= 1
    assert records.met(1.3, "<= 1.2") is False and records.met(1.0, None) is None


def test_where_a_record_goes_is_not_part_of_its_command():
    assert harness._without_record_options(["--repeat", "3", "--records", "/tmp/x", "--no-record",
                                            "--records=/y", "--quick"]) == ["--repeat", "3", "--quick"]


SAMPLE = {"benchmark": "benchmarks.compare_speed", "argv": ["--rounds", "5"], "date": "2026-11-27 10:16 UTC",
          "commit": "c5aceaa", "dirty": False,
          "machine": {"name": "2-core AMD EPYC", "cpu": "AMD EPYC", "cores": 2, "gpu": None, "system": "Linux x86_64",
                      "slug": "2-core-amd-epyc"},
          "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "pandas": "3.1.2"}, "threads": {"torch": None},
          "load": [0.41, 1.2], "seconds": {"script": [1.9, 2.0], "compare": [2.1, 2.2]},
          "figures": [{"name": "compare / script, its time", "ratio": 1.105, "rounds": [1.105, 1.1], "unit": "x",
                       "goal": "<= 1.2", "met": True}], "notes": {}}


def test_render_builds_the_table_from_the_newest_record_of_each_command(tmp_path):
    older = {**SAMPLE, "commit": "0000000", "figures": [{**SAMPLE["figures"][0], "ratio": 9.0}]}
    with open(tmp_path / "2-core-amd-epyc.jsonl", "w", encoding="utf-8") as fh:
        fh.write(json.dumps(older) + "\n" + json.dumps(SAMPLE) + "\n")
    text = render.markdown(list(records.read(tmp_path)))
    assert "### 2-core AMD EPYC" in text and "`python -m benchmarks.compare_speed --rounds 5`" in text
    assert "2026-11-27 10:16 UTC; commit c5aceaa; torch 2.13.0+cpu, pandas 3.1.2; load 0.41 to 1.20." in text
    assert "| compare / script, its time | **1.10x** | 1.10, 1.10 | <= 1.2: met |" in text
    assert "9.00x" not in text and "0000000" not in text
    assert max(map(len, text.splitlines())) <= 120
    page = f"intro\n{render.BEGIN}\nold figures\n{render.END}\nrest\n"
    assert render.replace(page, text) == f"intro\n{render.BEGIN}\n{text.rstrip()}\n{render.END}\nrest\n"


def test_the_performance_page_shows_what_the_committed_records_render(capsys):
    """No figure in the rendered block of docs/performance.md is typed by hand."""
    assert render.main(["--records", str(records.DEFAULT), "--check", str(ROOT / "docs" / "performance.md")]) == 0, \
        capsys.readouterr().out


def test_tuned_budget_counts_what_each_path_logged_and_says_which_options_are_missing(tmp_path):
    from benchmarks import tuned_budget

    have, lines = tuned_budget.offered(["full", "plan", "halving", "sequential"], "--tune ... --halving <int>")
    assert have == ["full", "plan", "halving"]
    assert lines == ["sequential: not measured: `actbench sweep --help` has no --judge-seeds-max in this checkout"]
    for run, epochs in {"0000_a": 3, "0001_b": 3}.items():  # two finished runs of 3 epochs
        (tmp_path / run).mkdir()
        (tmp_path / run / "losses.csv").write_text("epoch,train_loss\n" + "".join(f"{e},0.5\n" for e in
                                                                                   range(1, epochs + 1)))
    (tmp_path / ".rungs").mkdir()  # a pruned run's first epoch and the promoted run's, again
    (tmp_path / ".rungs" / "rung1.csv").write_text("run,epoch,val_loss\n0002_c,1,0.4\n0000_a,1,0.4\n")
    assert tuned_budget.logged(tmp_path) == (3, 7)
    assert tuned_budget.chosen("activation,lr,n\nrelu,0.01,2\ngelu,0.001,2\n") == "gelu 0.001, relu 0.01"


@pytest.mark.slow
def test_tuned_budget_trains_the_plan_and_finds_compares_csv_byte_for_byte_the_full_grids(tmp_path, capsys):
    """At a tiny size (2 activations x 2 rates x 4 seeds, 1 epoch): the full grid's 16 members and the
    plan's 2 x 2 x 2 tuning + 2 x 2 judging members, and compare --tune's CSV the same on both (four
    actbench processes: 30-40 s on the 2-core VM at a load of 4)."""
    from benchmarks import tuned_budget

    rec = tuned_budget.main(["--records", str(tmp_path), "--activations", "gelu,relu", "--lrs", "1e-3,1e-2",
                             "--seeds", "4", "--tune-seeds", "2", "--epochs", "1", "--paths", "full,plan"])
    out = capsys.readouterr().out
    assert "full: 16 members, 16 member-epochs (100% of the full grid's)" in out
    assert "plan: 12 members, 12 member-epochs (75% of the full grid's)" in out
    assert "compare --tune CSV of plan byte for byte the full grid's: yes" in out
    assert rec["notes"]["member_epochs"] == {"full": 16, "plan": 12} and rec["notes"]["identical_to_full"] == {
        "plan": True}
    figures = {f["name"]: f for f in rec["figures"]}
    assert figures["full / plan, member-epochs"]["ratio"] == round(16 / 12, 4)
    assert figures["compare --tune CSV, plan == full grid (1 = yes)"]["met"] is True
    assert len(rec["seconds"]["full"]) == len(rec["seconds"]["plan"]) == 1
    assert len(list(tmp_path.glob("*.jsonl"))) == 1
