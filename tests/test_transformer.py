"""model=transformer through the commands: a run and a sweep on text, a member of a stack equal to
the same run alone bit for bit (held-out splits sampled, or the test split judged whole), gated units
at matched parameters, resume after a signal, and bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from activation_bench.cli.main import app
from activation_bench.config.compose import compose
from activation_bench.engine import train as train_mod
from activation_bench.engine.models import gpt_alone, registry
from tests.conftest import assert_refused_by_run_and_sweep, files_under
from tests.test_checkpoint import _run, assert_same_outputs

TINY_GPT = ["model=transformer", "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=8",
            "batch_size=4", "epochs=2", "data.steps=3", "data.eval_windows=4"]
# the test split judged whole (the default): validation on 4 fixed windows, the test split's every window
WHOLE = ["data.eval_windows=null", "data.val_windows=4"]


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.txt"
    path.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40, encoding="utf-8")
    return path


@pytest.fixture
def stack_sizes(monkeypatch) -> list[int]:
    """The size of each stack train() builds in this process (a lone run padded with its copy: 2)."""
    real = train_mod._train
    sizes: list[int] = []

    def spy(cfgs, *args, **kwargs):
        sizes.append(len(cfgs))
        return real(cfgs, *args, **kwargs)

    monkeypatch.setattr(train_mod, "_train", spy)
    return sizes


def _lone_size(overrides: list[str]) -> int:
    """The stack a lone run of these overrides trains as here: 1, or 2 where the probe pads it."""
    c = compose(overrides)
    return 2 if registry.of(c).pads_alone(c, "cpu", torch.float32) else 1


def _summary(root: Path) -> dict:
    (path,) = root.rglob("summary.json")
    return json.loads(path.read_text())


def test_a_transformer_run_on_a_text_file(runner, runs_dir, text_file):
    out = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), *TINY_GPT, "data=text", f"data.path={text_file}"])
    assert out.exit_code == 0, out.output
    s = _summary(runs_dir)
    assert s["status"] == "complete" and s["model"].startswith("GPT 1 x 16, 2 heads, block 8")
    assert s["data"]["vocab_size"] == len(set(text_file.read_text())) and s["depth"] == 1
    assert 0 < s["final_test_loss"] < 10 and 0 <= s["final_test_acc"] <= 1
    header = next(runs_dir.rglob("losses.csv")).read_text().splitlines()[0]
    assert header == "epoch,train_loss,val_loss,test_loss,val_acc,test_acc"


@pytest.mark.parametrize("held_out", [[], WHOLE], ids=["sampled", "whole"])
def test_a_member_of_a_stacked_sweep_is_the_same_run_alone_bit_for_bit(runner, tmp_path, held_out, stack_sizes,
                                                                      monkeypatch):
    from tests.test_report import leave_figures_undrawn

    leave_figures_undrawn(monkeypatch)  # the page's text is read, not its figures' drawing (test_report.py draws)
    sweep = ["sweep", "--runs-dir", str(tmp_path), "-q", *TINY_GPT, *held_out, "data=python_docs", "--name", "s",
             "activation=gelu,relu,relu2,swiglu,bilinear", "seed=range(2)", "model.dropout=0.1"]
    out = runner.invoke(app, sweep)
    assert out.exit_code == 0, out.output
    for act in ("relu2", "swiglu"):
        alone = tmp_path / f"alone-{act}"
        out = runner.invoke(app, ["run", "--runs-dir", str(alone), "-q", *TINY_GPT, *held_out, "data=python_docs",
                                  f"activation={act}", "seed=1", "model.dropout=0.1"])
        assert out.exit_code == 0, out.output
        # trained as a stack of one wherever this machine's probe allows (gpt_alone.py)
        assert stack_sizes[-1] == _lone_size([*TINY_GPT, *held_out, "data=python_docs", f"activation={act}"])
        (member,) = (tmp_path / "s").glob(f"*activation={act}_seed=1*/losses.csv")
        assert next(alone.rglob("losses.csv")).read_bytes() == member.read_bytes()
        windows = sorted(p.name for p in member.parent.iterdir() if p.name == "test_windows.csv")
        assert windows == (["test_windows.csv"] if held_out else [])
        if held_out:  # every window of the whole test split, the same in the stack as alone
            assert next(alone.rglob("test_windows.csv")).read_bytes() == (member.parent / windows[0]).read_bytes()
    # compare names each group's parameter count where they differ (here: the gated units' 2/3 width)
    out = runner.invoke(app, ["compare", str(tmp_path / "s"), "--loss", "val_loss", "--format", "csv"])
    assert out.exit_code == 0, out.output
    params = {line.split(",")[0]: line.split(",")[1] for line in out.stdout.splitlines()[1:]}
    assert params["gelu"] == params["relu"] == params["relu2"] != params["swiglu"] == params["bilinear"]
    # and the report names the architecture and the counts
    out = runner.invoke(app, ["report", str(tmp_path / "s"), "-o", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    html = (tmp_path / "r.html").read_text()
    assert ">params</th>" in html and "GPT 1 x 16, 2 heads, block 8" in html and f"{int(params['swiglu']):,}" in html


@pytest.mark.parametrize("held_out", [[], WHOLE], ids=["sampled", "whole"])
def test_a_lone_run_gives_the_same_bits_padded_or_not(runner, tmp_path, monkeypatch, stack_sizes, held_out):
    args = [*TINY_GPT, *held_out, "data=python_docs", "activation=gelu", "seed=3", "model.dropout=0.1"]
    out = runner.invoke(app, ["run", "--runs-dir", str(tmp_path / "probed"), "-q", *args])
    assert out.exit_code == 0, out.output
    assert stack_sizes == [_lone_size(args)]
    # the probe forced to say that a stack of one rounds differently: the run is padded with its copy
    monkeypatch.setattr(gpt_alone, "_ANSWERS", {})
    monkeypatch.setattr(gpt_alone, "probe", lambda *a: False)
    out = runner.invoke(app, ["run", "--runs-dir", str(tmp_path / "padded"), "-q", *args])
    assert out.exit_code == 0, out.output
    assert stack_sizes[-1] == 2
    outputs = ["losses.csv", "test_windows.csv"] if held_out else ["losses.csv"]
    for name in outputs:
        (probed,), (padded,) = (list((tmp_path / d).rglob(name)) for d in ("probed", "padded"))
        assert probed.read_bytes() == padded.read_bytes()
    (probed,), (padded,) = (list((tmp_path / d).rglob("summary.json")) for d in ("probed", "padded"))
    drop = ("wall_time_s", "created")  # the only fields that differ between two runs of one config
    a, b = ({k: v for k, v in json.loads(p.read_text()).items() if k not in drop} for p in (probed, padded))
    assert a == b


def test_gated_units_match_the_ungated_parameter_count(runner, runs_dir):
    counts = {}
    for act, match in (("gelu", "params"), ("swiglu", "params"), ("swiglu", "width")):
        root = runs_dir / f"{act}-{match}"
        out = runner.invoke(app, ["run", "--runs-dir", str(root), "-q", *TINY_GPT, "data=python_docs",
                                  f"activation={act}", f"model.ffn_match={match}", "epochs=1"])
        assert out.exit_code == 0, out.output
        counts[act, match] = _summary(root)["n_params"]
    ffn = 2 * 16 * 64  # the ungated block's two matrices (d = 16, 4d hidden)
    # 2/3 of 64 rounds to 43: 3 x 16 x 43 = 2,064 weights against 2,048
    assert counts["swiglu", "params"] - counts["gelu", "params"] == 3 * 16 * 43 - ffn
    assert counts["swiglu", "width"] - counts["gelu", "params"] == 3 * 16 * 64 - ffn


@pytest.mark.parametrize("held_out", [[], WHOLE], ids=["sampled", "whole"])
def test_a_stopped_transformer_resumes_bit_for_bit(runner, tmp_path, monkeypatch, held_out):
    args = [*TINY_GPT, *held_out, "data=python_docs", "epochs=4", "model.dropout=0.1", "model.attn_dropout=0.1"]
    assert _run(runner, tmp_path / "ref", args, monkeypatch).exit_code == 0
    assert _run(runner, tmp_path / "b", args, monkeypatch, "TERM@2.1").exit_code == 143
    assert _run(runner, tmp_path / "b", args, monkeypatch).exit_code == 0
    assert_same_outputs(tmp_path / "ref" / "r", tmp_path / "b" / "r")


@pytest.mark.parametrize(("args", "message"), [
    (["model.n_embd=15"], "model.n_embd (15) must be a multiple of model.n_head (2)"),
    (["model.ffn_match=half"], "unknown model.ffn_match 'half'"),
    (["model.norm=batch"], "unknown model.norm 'batch' for model=transformer"),
    (["batch_size=null"], "is text, trained on random windows: set batch_size (windows per member and step)"),
    (["model.attn_dropout=1.0"], "model.attn_dropout must be in [0, 1)"),
])
def test_bad_transformer_input_is_refused_in_one_line(runner, runs_dir, args, message):
    assert_refused_by_run_and_sweep(runner, runs_dir, [*TINY_GPT, "data=python_docs", *args], message)


def test_a_transformer_on_a_table_is_refused(runner, runs_dir):
    assert_refused_by_run_and_sweep(runner, runs_dir, ["model=transformer", "batch_size=4", "data=diabetes"],
                                    "model=transformer models text")


def test_another_family_on_text_is_refused(runner, runs_dir):
    assert_refused_by_run_and_sweep(runner, runs_dir, ["data=python_docs", "data.steps=2"], "model.block_size")


@pytest.mark.parametrize(("content", "message"), [
    (b"", "empty"),
    (b"abc\xff\xfe def" * 20, "UTF-8"),
    (b"too short", "block_size"),
])
def test_a_bad_text_file_is_refused_in_one_line(runner, runs_dir, tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    assert_refused_by_run_and_sweep(runner, runs_dir, [*TINY_GPT, "data=text", f"data.path={path}"], message)
    assert files_under(runs_dir) == []


@pytest.mark.parametrize("act", [["activation=prelu"], ["activation=expr", "activation.fn=\"x*sigmoid(1.702*x)\""],
                                 ["activation=expr", "activation.fn=\"max(x, 0)**2\""],
                                 ["activation=expr", "activation.fn=\"a*x + b*x*x\"", "activation.learnable=true",
                                  "+activation.a=1.0", "+activation.b=0.1"]])
def test_the_feed_forward_block_takes_learned_and_expression_activations(runner, runs_dir, act):
    out = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "-q", *TINY_GPT, "data=python_docs", *act])
    assert out.exit_code == 0, out.output
    assert _summary(runs_dir)["status"] == "complete"


def test_memory_estimate_counts_the_written_out_attention_of_attention_dropout():
    from activation_bench.config.compose import compose
    from activation_bench.engine.models.transformer import Transformer

    base = [*TINY_GPT, "data=python_docs"]
    plain, dropped = (Transformer().memory(compose([*base, *o])) for o in ([], ["model.attn_dropout=0.1"]))
    # two more [T, T] blocks per head, block and window: 2 x n_layer 1 x n_head 2 x T 8 x (batch 4 x T 8)
    assert dropped.params == plain.params
    assert dropped.activations - plain.activations == 2 * 1 * 2 * 8 * 4 * 8


def test_sampled_evaluation_passes_a_chunk_of_windows_at_a_time_with_the_bits_of_one_pass(text_file):
    """More sampled windows than text.CHUNK go through the model a chunk at a time, as a whole split
    does (one pass over them all streamed every window's activations through memory): the logits
    are those of one pass over all of them, bit for bit, for every member of a mixed stack."""
    from activation_bench.config.compose import compose_many
    from activation_bench.data import text

    windows = text.CHUNK * 2 + 5  # two whole chunks and a short one
    cfgs = compose_many([[*TINY_GPT, "data=text", f"data.path={text_file}", f"data.eval_windows={windows}",
                          f"activation={act}", f"seed={seed}"] for act in ("gelu", "relu") for seed in (0, 1)])
    assert registry.of(cfgs[0]).eval_rows == text.CHUNK
    stack = train_mod._build(cfgs)
    x = stack.val[0]
    assert x.shape[1] == windows
    stack.model.eval()
    with torch.no_grad():
        assert torch.equal(stack.predict(x), stack.model(x))
