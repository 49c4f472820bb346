"""model=module (#79): outputs read from Hugging Face-style objects (`logits`) and tuples (the
first element), the data's sizes filled into the config (${data:NAME}, resolved after the data
loads and saved resolved), data.channels=3 repeating a single-channel image, and the bad inputs
of all three refused in one line. Stand-in modules only (tests/module_models.py): no third-party
package."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from activation_bench.cli.main import app
from activation_bench.config.compose import compose
from tests.conftest import assert_refused_by_run_and_sweep, files_under
from tests.engine_helpers import stacked_and_alone

M = "tests.module_models"
TABLE = ["model=module", f"model.target={M}:Returns", "model.replace=[ReLU]", "data=iris", "epochs=2",
         "batch_size=32", "lr=0.01"]
SIZED = ["model=module", f"model.target={M}:Sized", "model.act_arg=act_layer", "data=digits", "data.n_train=150",
         "+model.kwargs.in_chans=${data:channels}", "+model.kwargs.num_classes=${data:classes}",
         "+model.kwargs.height=${data:height}", "+model.kwargs.width=${data:width}", "epochs=1", "batch_size=64"]


@pytest.fixture(scope="module")
def plain() -> dict:
    """The tensor-returning Fixed's members trained alone, by (activation, seed): the same for every
    kind of output below, trained once for the module (tests only read the results)."""
    return {(lab["activation"], lab["seed"]): alone for lab, alone, _ in
            stacked_and_alone([*TABLE, "model.target=tests.module_models:Fixed", "activation=relu,tanh", "seed=0,1"])}


@pytest.mark.parametrize(("returns", "read_as"), [("logits", "logits"), ("mapping", "logits"),
                                                  ("tuple", "first element"), ("list", "first element")])
def test_outputs_inside_objects_train_as_the_tensor_would_and_members_equal_alone(returns, read_as, plain):
    results = stacked_and_alone([*TABLE, f"+model.kwargs.returns={returns}", "activation=relu,tanh", "seed=0,1"])
    for labels, alone, stacked in results:
        assert repr(alone.train_loss) == repr(stacked.train_loss), labels
        assert alone.model_info["output"] == read_as
        # the same layers as Fixed, drawn in the same order: the same losses as the tensor it wraps
        assert alone.train_loss == plain[(labels["activation"], labels["seed"])].train_loss
        assert plain[(labels["activation"], labels["seed"])].model_info["output"] == "tensor"
    by = {(lab["activation"], lab["seed"]): alone.train_loss for lab, alone, _ in results}
    assert by[("relu", "0")] != by[("tanh", "0")]


def test_run_summary_and_summary_json_say_what_the_output_was_read_as(runner, tmp_path):
    result = runner.invoke(app, ["run", "--runs-dir", str(tmp_path), "--name", "hf", *TABLE,
                                 "+model.kwargs.returns=logits"])
    assert result.exit_code == 0, result.output
    assert "output" in result.output and "logits" in result.output
    assert json.loads((tmp_path / "hf" / "summary.json").read_text())["output"] == "logits"


def test_data_sizes_fill_the_constructor_and_are_saved_resolved(runner, tmp_path):
    # one command over three tables: each member's features and classes from its own data
    grid = [*TABLE[:3], "model.target=tests.module_models:Fixed", "data=iris,wine,breast_cancer", "epochs=1",
            "+model.kwargs.n_in=${data:features}", "+model.kwargs.n_out=${data:classes}"]
    result = runner.invoke(app, ["sweep", "--runs-dir", str(tmp_path), "--name", "sized", "-q", *grid])
    assert result.exit_code == 0, result.output
    kwargs = {}
    for path in sorted((tmp_path / "sized").glob("*/config.yaml")):
        saved = yaml.safe_load(path.read_text())
        kwargs[saved["data"]["name"]] = saved["model"]["kwargs"]
        assert "${" not in path.read_text()  # resolved: the saved config needs no data to read it
    assert kwargs == {"iris": {"n_in": 4, "n_out": 3}, "wine": {"n_in": 13, "n_out": 3},
                      "breast_cancer": {"n_in": 30, "n_out": 2}}
    # run --config reproduces the member from its resolved config
    member = next((tmp_path / "sized").glob("*data=wine*"))
    again = runner.invoke(app, ["run", "--runs-dir", str(tmp_path), "--name", "again", "--config",
                                str(member / "config.yaml")])
    assert again.exit_code == 0, again.output
    first = json.loads((member / "summary.json").read_text())
    second = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert first["config_hash"] == second["config_hash"] and first["final_loss"] == second["final_loss"]
    # actbench config shows the values
    shown = runner.invoke(app, ["config", *TABLE[:3], "model.target=tests.module_models:Fixed", "data=wine",
                                "+model.kwargs.n_in=${data:features}", "+model.kwargs.n_out=${data:outputs}"])
    assert shown.exit_code == 0, shown.output
    assert "n_in: 13" in shown.output and "n_out: 3" in shown.output and "${" not in shown.output


def test_sweep_dry_run_shows_each_members_filled_in_sizes(runner, tmp_path):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(tmp_path), "--dry-run", *TABLE[:3],
                                 "model.target=tests.module_models:Fixed", "data=iris,wine",
                                 "+model.kwargs.n_in=${data:features}", "+model.kwargs.n_out=${data:classes}"])
    assert result.exit_code == 0, result.output
    assert "model.kwargs.n_in" in result.output and "model.kwargs.n_out" in result.output
    rows = {line.split("│")[2].strip(): [c.strip() for c in line.split("│")[3:5]]
            for line in result.output.splitlines() if line.startswith("│")}
    assert rows == {"iris": ["4", "3"], "wine": ["13", "3"]}
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_a_study_file_takes_the_sizes_of_each_source_it_sweeps(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("""title: sizes
runs_dir: runs
output: out
sweeps:
  tables:
    grid: ['data=iris,wine']
    overrides: [model=module, model.target=tests.module_models:Fixed, 'model.replace=[ReLU]',
                '+model.kwargs.n_in=${data:features}', '+model.kwargs.n_out=${data:classes}', epochs=1]
comparisons:
  acc: {sweeps: [tables], loss: test_acc}
""")
    result = runner.invoke(app, ["study", "run", "s.yaml", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "2 members to train" in result.output


def test_every_size_of_every_kind_of_data(tmp_path):
    from activation_bench.data.shapes import sizes

    (tmp_path / "t.txt").write_text("abcab " * 200)
    assert sizes(compose(["data=iris"])) == {"outputs": 3, "features": 4, "classes": 3}
    assert sizes(compose(["data=diabetes"])) == {"outputs": 1, "features": 10}
    assert sizes(compose(["data=digits"])) == {"outputs": 10, "features": 64, "classes": 10, "channels": 1,
                                                "height": 8, "width": 8}
    assert sizes(compose(["data=mnist1d"])) == {"outputs": 10, "features": 40, "classes": 10, "channels": 1,
                                                 "length": 40}
    assert sizes(compose(["data=normal", "data.input_dim=7"])) == {"outputs": 1, "features": 7}
    text = compose(["data=text", f"data.path={tmp_path / 't.txt'}", "data.block_size=16", "batch_size=4",
                    "model=module", f"model.target={M}:TinyLM", "model.act_arg=act_layer",
                    "+model.kwargs.vocab=${data:vocab}"])
    assert sizes(text) == {"outputs": 4, "vocab": 4, "length": 16}
    assert text.model.kwargs.vocab == 4


def test_channels_3_repeats_a_gray_image_and_is_recorded(runner, tmp_path):
    cfg = compose([*SIZED, "data.channels=3"])
    assert dict(cfg.model.kwargs) == {"in_chans": 3, "num_classes": 10, "height": 8, "width": 8}
    assert cfg.data.channels == 3
    results = stacked_and_alone([*SIZED, "data.channels=3", "activation=relu,silu"])
    for labels, alone, stacked in results:
        assert repr(alone.train_loss) == repr(stacked.train_loss), labels
    # the three channels are the gray one: the same input a 1-channel model gets
    from activation_bench.engine.models.module_io import shaped

    x = torch.randn(5, 64)
    three = shaped(x, 1, (3, 8, 8), True)
    assert three.shape == (5, 3, 8, 8) and all(torch.equal(three[:, c], x.reshape(5, 8, 8)) for c in range(3))
    result = runner.invoke(app, ["run", "--runs-dir", str(tmp_path), "--name", "rgb", *SIZED, "data.channels=3"])
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((tmp_path / "rgb" / "config.yaml").read_text())
    assert saved["data"]["channels"] == 3 and saved["model"]["kwargs"]["in_chans"] == 3
    # without it, the model built for 1 channel takes the source as it is
    assert compose(SIZED).model.kwargs.in_chans == 1


def test_vmap_reads_outputs_and_repeats_channels_too():
    results = stacked_and_alone([*SIZED, "data.channels=3", "model.vmap=true", "activation=relu,silu"])
    for _labels, alone, stacked in results:
        assert alone.model_info["output"] == "tensor"
        assert stacked.train_loss == pytest.approx(alone.train_loss, rel=1e-3)
    results = stacked_and_alone([*TABLE, "+model.kwargs.returns=logits", "model.vmap=true", "seed=0,1"])
    for _labels, alone, stacked in results:
        assert alone.model_info["output"] == "logits"
        assert stacked.train_loss == pytest.approx(alone.train_loss, rel=1e-3)


BAD = {
    "neither": ([*TABLE, "+model.kwargs.returns=neither"],
                "the model returned an Output (its logits is None), not a tensor of shape [2, 3] (3 classes)"),
    "none-first": ([*TABLE, "+model.kwargs.returns=none-first"],
                   "the model returned a tuple (its first element is None), not a tensor of shape [2, 3]"),
    "logits-wrong-shape": ([*TABLE, "+model.kwargs.returns=logits", "+model.kwargs.n_out=5"],
                           "the model's output (its logits) has shape [2, 5]; 3 classes needs [2, 3]"),
    "no-parameters": ([*TABLE, f"model.target={M}:NoParams"],
                      f"model.target '{M}:NoParams' has no parameters: there is nothing to train"),
    "frozen": ([*TABLE, f"model.target={M}:Frozen"], "has 112 of its 139 parameters frozen (requires_grad=False)"),
    "size-the-data-lacks": ([*TABLE, "model.target=tests.module_models:Fixed", "+model.kwargs.n_in=${data:channels}"],
                            "model.kwargs.n_in=${data:channels}: data=iris has no channels"),
    "unknown-size": ([*TABLE, "+model.kwargs.n_out=${data:clases}"], "unknown size 'clases'; valid: classes,"),
    "size-in-text": ([*TABLE, "+model.kwargs.n_out=x${data:classes}"], "${data:NAME} stands alone as a value"),
    "regression-classes": ([*TABLE, "model.target=tests.module_models:Fixed", "data=diabetes",
                            "+model.kwargs.n_out=${data:classes}"], "data=diabetes has no classes"),
    "gray-into-colour": (["model=module", f"model.target={M}:rgb_net", "model.replace=[ReLU]", "data=digits"],
                         "expected input[2, 1, 8, 8] to have 3 channels, but got 1 channels instead; "
                         "data.channels=3 repeats the gray channel"),
    "channels-on-a-table": ([*TABLE, "data.channels=3"], "data.channels applies to images"),
    "channels-not-3": ([*SIZED, "data.channels=2"], "data.channels=2: data=digits has 1 channel; data.channels=3"),
    "channels-other-model": (["model=cnn", "data=digits", "data.channels=3"], "for model=module"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_exit_2_nothing_written(runner, runs_dir, case):
    args, message = BAD[case]
    assert_refused_by_run_and_sweep(runner, runs_dir, args, message)
    assert files_under(runs_dir) == []
