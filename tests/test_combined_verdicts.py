"""A study's combined table (`tables:`) carries each comparison's verdict where that comparison has a
margin (and, over a sequentially judged sweep, the seeds it used and why it stopped), in markdown,
CSV and JSON, with the values and words of the comparison's own table; a comparison without a
margin adds nothing, so a table without margins is byte for byte what it was."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from activation_bench.cli.main import app
from activation_bench.render import combined
from tests import test_study, test_study_sequential
from tests.conftest import built_once

# the tiny study's comparisons judged against relu: accuracy within 20 pp, loss within a ratio of 1.3
MARGINS = test_study.STUDY.replace("tune_on: val_acc}", "tune_on: val_acc, baseline: activation=relu, margin: 20}") \
    .replace("title: test log loss}", "title: test log loss, baseline: activation=relu, margin: 1.3}")
BASELINE_ONLY = MARGINS.replace(", margin: 20}", "}").replace(", margin: 1.3}", "}")
LOSS_ONLY = MARGINS.replace(", margin: 20}", "}")
# sequential judging with both comparisons side by side
SEQUENTIAL = test_study_sequential.STUDY + "tables:\n  both: {comparisons: [acc, loss]}\n"


def _study_tables(folder: Path, text: str) -> None:
    """Write text as folder/study.yaml and render its outputs (`study tables`) from the sweeps there:
    its tables, and its figures built but not drawn (only tables and the page's text are read here;
    test_study draws a study's figures)."""
    from typer.testing import CliRunner

    from tests.conftest import leave_files_undrawn
    from tests.test_report import leave_figures_undrawn

    (folder / "study.yaml").write_text(text, encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with pytest.MonkeyPatch.context() as mp:
            leave_files_undrawn(mp)
            leave_figures_undrawn(mp)
            result = CliRunner().invoke(app, ["study", "tables", "study.yaml"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """test_study's tiny study (trained once per test run, shared with it), its outputs rendered again
    with margins on its comparisons, on one of them, and with a baseline but no margin, each in its
    own folder."""
    finished = built_once(tmp_path_factory, "tiny-study", test_study._run_tiny_study)
    root = tmp_path_factory.mktemp("combined-verdicts")
    for name, text in (("margins", MARGINS), ("loss-only", LOSS_ONLY), ("baseline", BASELINE_ONLY)):
        shutil.copytree(finished, root / name, copy_function=shutil.copy2)
        _study_tables(root / name, text)
    return root


@pytest.fixture(scope="module")
def sequential(tmp_path_factory) -> Path:
    """test_study_sequential's study (trained once per test run, shared with it), its outputs rendered
    again with both comparisons in one combined table."""
    root = tmp_path_factory.mktemp("combined-verdicts-sequential")
    test_study_sequential.copy_study(test_study_sequential.finished_study(tmp_path_factory), root)
    _study_tables(root, SEQUENTIAL)
    return root / "out"


def _md_table(text: str) -> list[dict[str, str]]:
    """The rows of the first markdown table in text, as {header: cell} (pipes inside cells escaped)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]

    def cells(line: str) -> list[str]:
        return [c.strip().replace("\\|", "|") for c in line.strip("|").replace("\\|", "\0").split("|")]

    heads = [h.replace("\0", "|") for h in cells(lines[0])]
    return [dict(zip(heads, [c.replace("\0", "|") for c in cells(ln)])) for ln in lines[2:]]


def _csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def _assert_verdicts_equal(out: Path, judged: dict[str, tuple[str, ...]]) -> None:
    """In every format the combined table `both` holds, per group, each part's verdict columns with
    the values of the part's own table; judged: part -> its columns (as in its own CSV)."""
    both_json = json.loads((out / "both.json").read_text())
    both_csv = {r["activation"]: r for r in _csv(out / "both.csv")}
    both_md = {r["activation"]: r for r in _md_table((out / "both.md").read_text())}
    md_heads = {"verdict": None, "seeds_used": "seeds", "stopped": "stopped"}
    for part, cols in judged.items():
        own_json = {r["activation"]: r for r in json.loads((out / f"{part}.json").read_text())["rows"]}
        own_csv = {r["activation"]: r for r in _csv(out / f"{part}.csv")}
        own_md = {r["activation"]: r for r in _md_table((out / f"{part}.md").read_text())}
        label = next(h for h in next(iter(own_md.values())) if h.startswith("verdict ("))
        assert {p["name"]: p.get("margin") for p in both_json["parts"]}[part] == \
            json.loads((out / f"{part}.json").read_text())["margin"]
        assert set(own_json) == {r["activation"] for r in both_json["rows"]} == set(both_csv) == set(both_md)
        for row in both_json["rows"]:
            group = row["activation"]
            for c in cols:
                assert row[part][c] == own_json[group][c], (part, group, c)
                assert both_csv[group][f"{part}.{c}"] == own_csv[group][c], (part, group, c)
                head = md_heads[c] or label
                assert both_md[group][f"{part}: {head}"] == own_md[group][head], (part, group, c)
            # CSV and JSON only: the interval the verdict read, the anytime p where sequential
            raw = [c for c in combined.JUDGED_RAW if c in own_json[group]]
            assert len(raw) == (3 if "seeds_used" in cols else 2), (part, raw)
            for c in raw:
                assert row[part][c] == own_json[group][c], (part, group, c)
                assert both_csv[group][f"{part}.{c}"] == own_csv[group][c], (part, group, c)
                assert not any(c in h for h in both_md[group]), (part, c)
    # the non-baseline group has a verdict in words, the baseline none (as in the own tables)
    for part in judged:
        verdicts = {r["activation"]: r[part]["verdict"] for r in both_json["rows"]}
        assert verdicts["relu"] == "" and verdicts["gelu"] in {"better", "worse", "equivalent", "undecided"}


def test_each_comparisons_verdict_in_every_format(tiny):
    out = tiny / "margins" / "out"
    _assert_verdicts_equal(out, {"acc": ("verdict",), "loss": ("verdict",)})
    md = (out / "both.md").read_text()
    assert "acc: verdict (20 pp)" in md and "loss: verdict (1.3x)" in md
    assert "seeds" not in _md_table(md)[0] and "acc.seeds_used" not in (out / "both.csv").read_text()
    parts = json.loads((out / "both.json").read_text())["parts"]
    assert [p["margin"]["interval"] for p in parts] == ["t, Bonferroni"] * 2
    assert "acc: verdict (20 pp)" in (out / "report.html").read_text()  # the page shows the same table


def test_verdicts_only_add_columns_and_no_margin_adds_none(tiny):
    """Without margins nothing changes; with them, their columns taken out leave the same table."""
    margins, plain = tiny / "margins" / "out", tiny / "baseline" / "out"
    for name in ("both.md", "both.csv", "both.json"):
        assert "verdict" not in (plain / name).read_text()
    rows = _csv(margins / "both.csv")
    kept = [{k: v for k, v in r.items() if k.split(".")[-1] not in ("verdict", *combined.JUDGED_RAW)} for r in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(kept[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(kept)
    assert buf.getvalue() == (plain / "both.csv").read_text()
    doc = json.loads((margins / "both.json").read_text())
    for part in doc["parts"]:
        del part["margin"]
    for row in doc["rows"]:
        for name in ("acc", "loss"):
            for c in ("verdict", *combined.JUDGED_RAW):
                row[name].pop(c, None)
    assert doc == json.loads((plain / "both.json").read_text())


def test_a_comparison_without_a_margin_has_no_verdict_beside_one_with(tiny):
    out = tiny / "loss-only" / "out"
    _assert_verdicts_equal(out, {"loss": ("verdict",)})
    head = (out / "both.csv").read_text().splitlines()[0].split(",")
    assert "loss.verdict" in head and not any(h.startswith("acc.") and "verdict" in h for h in head)
    assert "acc: verdict" not in (out / "both.md").read_text()
    assert "margin" not in json.loads((out / "both.json").read_text())["parts"][0]


def test_sequential_verdicts_with_seeds_used_and_why_they_stopped(sequential):
    _assert_verdicts_equal(sequential, {p: ("verdict", "seeds_used", "stopped") for p in ("acc", "loss")})
    md = (sequential / "both.md").read_text()
    for head in ("acc: verdict (20 pp)", "acc: seeds", "acc: stopped", "loss: verdict (1.3x)", "loss: stopped"):
        assert head in md, head
    parts = json.loads((sequential / "both.json").read_text())["parts"]
    assert [p["margin"]["interval"] for p in parts] == ["confidence sequence"] * 2
    gelu = next(r for r in _csv(sequential / "both.csv") if r["activation"] == "gelu")
    assert gelu["acc.stopped"] in {"decided", "max seeds"} and int(gelu["loss.seeds_used"]) >= 2
