"""The classifier in the engine: K outputs, softmax cross-entropy, accuracy, dropout, and what a
run writes. Data: scikit-learn's bundled iris table (150 rows, 4 features, 3 classes)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from engine_helpers import stacked_and_alone

from activation_bench.cli.main import app
from activation_bench.config.compose import compose, compose_many
from activation_bench.engine import plan, train
from activation_bench.engine.models.base import MemberDropout

IRIS = ["data=iris", "epochs=12", "model.hidden_dim=16", "lr=0.01"]
COLUMNS = ("train_loss", "train_eval_loss", "val_loss", "test_loss", "val_acc", "test_acc")


def test_stacked_members_equal_runs_alone_bitwise_with_cross_entropy_and_dropout():
    """Mixed activations, seeds, dropout and shuffled minibatches in one grid: every member, every
    logged column, bit for bit as the same run alone."""
    grid = [*IRIS, "activation=gelu,relu,elu,prelu", "seed=0,1", "model.dropout=0,0.5", "model.depth=2",
            "batch_size=30", "shuffle=true", "log.train_eval=true"]
    for labels, alone, stacked in stacked_and_alone(grid):
        for col in COLUMNS:
            assert getattr(alone, col) == getattr(stacked, col), (labels, col)


def test_regression_with_dropout_is_stacked_as_alone():
    grid = ["activation=gelu,tanh", "seed=0,1", "model.dropout=0.25", "epochs=10", "data.n_val=4"]
    for labels, alone, stacked in stacked_and_alone(grid):
        assert alone.train_loss == stacked.train_loss, labels
        assert alone.val_loss == stacked.val_loss, labels


def test_classifier_matches_plain_torch_cross_entropy_and_adam():
    """Reference: nn.Sequential + nn.CrossEntropyLoss + torch.optim.Adam, the same initial weights
    and the same (fixed-order) minibatches; rtol 1e-5 over the epochs, accuracies equal."""
    from activation_bench.data import splits
    from activation_bench.data.synthetic import generator
    from activation_bench.engine.models.stacked_mlp import member_weights

    cfg = compose([*IRIS, "activation=gelu", "model.depth=2", "batch_size=30"])
    ds = splits.make_dataset(cfg)
    k = int(ds.y.max()) + 1
    assert ds.y.dtype == torch.int64 and k == 3
    layers = member_weights("torch_default", 4, 16, 16, 2, generator(cfg.seed, "init"), torch.float32, k)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.GELU(), torch.nn.Linear(16, 16), torch.nn.GELU(),
                              torch.nn.Linear(16, k))
    with torch.no_grad():
        for lin, (w, b) in zip(net[::2], layers):
            lin.weight.copy_(w.T), lin.bias.copy_(b)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    ce = torch.nn.CrossEntropyLoss()
    ref_train, ref_val, ref_acc = [], [], []
    for _ in range(cfg.epochs):
        losses = []
        for i in range(0, len(ds.y), 30):
            opt.zero_grad()
            loss = ce(net(ds.x[i : i + 30]), ds.y[i : i + 30])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        ref_train.append(sum(losses) / len(losses))
        with torch.no_grad():
            logits = net(ds.x_val)
            ref_val.append(ce(logits, ds.y_val).item())
            ref_acc.append((logits.argmax(1) == ds.y_val).float().mean().item())
    ours = train.train([cfg])[0]
    assert ours.train_loss == pytest.approx(ref_train, rel=1e-5)
    assert ours.val_loss == pytest.approx(ref_val, rel=1e-5)
    assert ours.val_acc == pytest.approx(ref_acc, abs=1e-7)


def test_validation_and_test_numbers_are_without_dropout():
    """Full batch, no dropout: the loss logged for the training split after epoch e (evaluation
    mode) is the training loss of epoch e + 1 (taken before its step). With dropout the training
    loss is noisier, but the evaluation numbers of two members sharing weights and seed but not
    their dropout would differ only through training."""
    res = train.train([compose([*IRIS, "log.train_eval=true"])])[0]
    assert res.train_eval_loss[:-1] == pytest.approx(res.train_loss[1:], rel=1e-6)
    dropped = train.train([compose([*IRIS, "log.train_eval=true", "model.dropout=0.5"])])[0]
    assert dropped.train_loss[0] != res.train_loss[0]  # dropout is on while training ...
    # ... and off for evaluation: before any step the two models are the same, so is their val loss
    first = train.train([compose([*IRIS, "epochs=1", "lr=1e-30"])])[0]
    first_dropped = train.train([compose([*IRIS, "epochs=1", "lr=1e-30", "model.dropout=0.5"])])[0]
    assert first.val_loss == first_dropped.val_loss and first.test_acc == first_dropped.test_acc


def test_member_dropout_masks_are_per_seed_scaled_and_at_rate_p():
    gens = {s: torch.Generator().manual_seed(s) for s in (0, 1)}
    drop = MemberDropout(0.25, [0, 1, 0], gens, "cpu")
    out = drop(torch.ones(3, 200, 50))
    assert set(out.unique().tolist()) == {0.0, torch.tensor(1 / 0.75).item()}
    assert torch.equal(out[0], out[2]) and not torch.equal(out[0], out[1])  # one seed, one mask
    assert (out == 0).float().mean().item() == pytest.approx(0.25, abs=0.01)


def test_accuracies_are_fractions_and_n_params_count_k_outputs():
    res = train.train([compose([*IRIS, "model.depth=1"])])[0]
    assert all(0.0 <= a <= 1.0 for a in res.val_acc + res.test_acc)
    assert res.n_params == 4 * 16 + 16 + 16 * 3 + 3
    assert res.data_info["n_classes"] == 3


def test_run_writes_accuracy_columns_and_reruns_bitwise(runner, runs_dir, tmp_path):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "--name", "c", "model.dropout=0.5",
                                 "log.train_eval=true", *IRIS])
    assert result.exit_code == 0, result.output
    assert "accuracy" in result.output
    run = runs_dir / "c"
    header = (run / "losses.csv").read_text().splitlines()[0]
    assert header == "epoch," + ",".join(COLUMNS)
    summary = json.loads((run / "summary.json").read_text())
    for key in ("final_val_acc", "final_test_acc", "early_stop_test_acc"):
        assert 0 <= summary[key] <= 1, key
    assert summary["data"]["task"] == "classification" and len(summary["data"]["classes"]) == 3
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["data"]["task"] == "classification" and saved["model"]["dropout"] == 0.5
    again = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), "--name", "d", "--config",
                                str(run / "config.yaml")])
    assert again.exit_code == 0, again.output
    assert (runs_dir / "d" / "losses.csv").read_text() == (run / "losses.csv").read_text()


def test_sweep_results_carry_accuracy(runner, runs_dir):
    result = runner.invoke(app, ["sweep", "--runs-dir", str(runs_dir), "--name", "s", "activation=gelu,relu",
                                 "seed=0,1", *IRIS])
    assert result.exit_code == 0, result.output
    header = (runs_dir / "s" / "results.csv").read_text().splitlines()[0].split(",")
    assert header[-5:] == ["epoch", "train_loss", "val_loss", "test_loss", "val_acc", "test_acc"][-5:]
    assert {"val_acc", "test_acc"} <= set(header)


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.dropout=1"], "model.dropout must be in [0, 1)"),
    (["model.dropout=-0.1"], "model.dropout must be in [0, 1)"),
    (["data=normal", "data.task=classification"], "needs class labels"),
    (["data.task=ordinal"], "unknown data.task 'ordinal'"),
])
def test_bad_classification_input_is_one_line_exit_2_nothing_written(runner, runs_dir, overrides, message):
    result = runner.invoke(app, ["run", "--runs-dir", str(runs_dir), *IRIS, *overrides])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_classifiers_and_regressors_stack_apart():
    cfgs = compose_many([IRIS, ["epochs=12", "model.hidden_dim=16"]])
    assert len(plan.plan_stacks(cfgs)) == 2


def test_every_member_of_a_wide_stack_computes_its_logits_as_alone():
    """Logit blocks [N, K] with N * K not a multiple of 16 floats (K = 10, N = 55: a last minibatch)
    sat at unaligned offsets for every other member, and MKL's batched product rounded those
    members differently; the output layer is padded to 16 columns so every member is as alone."""
    from activation_bench.engine.models.base import Slice
    from activation_bench.engine.models.losses import member_cross_entropy
    from activation_bench.engine.models.stacked_mlp import StackedMLP

    gen = torch.Generator().manual_seed(0)
    m, n, h, k = 12, 55, 128, 10
    x, w1 = torch.randn(m, n, 8, generator=gen), torch.randn(m, 8, h, generator=gen)
    b1 = torch.randn(m, 1, h, generator=gen)
    w2, b2 = torch.randn(m, h, k, generator=gen) * 0.1, torch.randn(m, 1, k, generator=gen)
    y = torch.randint(0, k, (m, n), generator=gen)

    def run(idx: list[int]) -> list[torch.Tensor]:
        model = StackedMLP([w1[idx]], [b1[idx]], w2[idx], b2[idx], [Slice(0, len(idx), [torch.nn.GELU()])])
        logits = model(x[idx])
        member_cross_entropy(logits, y[idx]).sum().backward()
        return [logits.detach(), *(p.grad for p in model.parameters())]

    stacked = run(list(range(m)))
    for i in range(m):
        alone = run([i, i])  # a lone member trains as a stack of two copies
        assert all(torch.equal(s[i], a[0]) for s, a in zip(stacked, alone)), i
