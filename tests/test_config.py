"""The config module: YAML output, Hydra settings, and config_hash's identity across releases."""

from __future__ import annotations

import pytest

from activation_bench.cfg import Cfg, dump_yaml, load_yaml
from activation_bench.config.compose import compose, compose_many
from activation_bench.config.grid import expand, hydra_settings
from activation_bench.config.hashing import LEGACY_DEFAULTS, config_hash
from activation_bench.errors import UsageError


def test_to_yaml_by_parts_equals_one_dump() -> None:
    members = [["activation=leaky_relu", "lr=1e-05", "seed=7"], ["data=uniform", "data.noise=0.5"],
               ["activation=custom", "activation._target_=torch.nn.Tanh"], ["dtype=float64", "batch_size=3"]]
    cfgs = compose_many(members)
    cfgs.append(Cfg.wrap({"s": "yes: no", "n": None, "l": [1, "2", {"a": float("inf")}], "t": True}))
    for cfg in cfgs + cfgs:  # the second pass comes from the memo
        assert cfg.to_yaml() == dump_yaml(cfg.plain())


def test_load_yaml_reads_what_safe_load_reads_and_refuses_what_it_refuses() -> None:
    """The libyaml loader behind resumed sweeps, compare and report: the same documents as
    yaml.safe_load (a sweep.yaml's shape, the YAML 1.1 scalars), and no Python objects built."""
    import yaml

    cfgs = compose_many([["activation=leaky_relu", "lr=1e-05", "seed=7"], ["data=uniform", "dtype=float64"]])
    doc = {"overrides": ["activation=gelu,relu", "seed=range(2)"], "keys": ["activation", "seed"],
           "members": [{"name": "0000_x", "overrides": ["seed=0"], "labels": {"seed": "0"}, "config_hash": "00ab"}],
           "configs": [c.plain() for c in cfgs]}
    scalars = "a: yes\nb: 1e-5\nc: 1.0e-5\nd: .inf\ne: 0o17\nf: 2026-12-01\ng: ~\nh: '007'\n"
    for text in (dump_yaml(doc), scalars, "[1, {a: [b, c]}]\n", ""):
        assert load_yaml(text) == yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object/apply:os.system ['true']\n")
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [1, 2\n")


def test_hydra_settings_are_recognised_in_every_spelling() -> None:
    texts = ["hydra.launcher.n_jobs=2", "+hydra.x=1", "++hydra.y=2", "~hydra", "hydra/launcher=joblib", "seed=1",
             "hydra_like=1", "data.hydra=1"]
    assert hydra_settings(texts) == texts[:5]
    for where in (compose, expand):
        with pytest.raises(UsageError, match="hydra.* settings configure a launcher"):
            where(["seed=1", "hydra.job.chdir=true"])


def test_default_config_hashes_as_the_layout_before_the_added_keys() -> None:
    """Keys added after the first release leave the hash alone while they hold their legacy values:
    the hash is that of the same config without them, so sweeps made earlier still resume."""
    import hashlib
    import json

    from activation_bench.data import tables

    for member in ([], ["data=uniform", "seed=3", "activation=relu"]):
        cfg = compose(member)
        old = cfg.plain()
        for key in (*tables.REAL_KEYS, "task", "root", "n_train", "steps", "eval_windows", "val_windows", "block_size",
                    "channels"):
            del old["data"][key]
        old["model"] = {"hidden_dim": old["model"]["hidden_dim"]}
        del old["log"]
        del old["engine"]
        for key in ("weight_decay", "beta2", "momentum", "nesterov", "grad_clip", "schedule", "warmup_steps",
                    "decay_steps", "min_lr"):  # the optimiser's settings (engine/optim.py), at their defaults
            del old[key]
        del old["checkpoint"]  # never hashed (NOT_HASHED)
        text = json.dumps(old, sort_keys=True, allow_nan=True)
        assert config_hash(cfg) == hashlib.sha256(text.encode()).hexdigest()[:16]
    legacy = {key.split(".", 1)[1] for group in LEGACY_DEFAULTS for key in group if key.startswith("data.")}
    assert legacy == {*tables.REAL_KEYS, "task", "root", "n_train", "steps", "eval_windows", "val_windows",
                      "block_size", "channels"}


def test_checkpoint_settings_are_not_hashed() -> None:
    """How often a checkpoint is written changes no result: the run keeps its hash (and resumes)."""
    base = config_hash(compose([]))
    assert config_hash(compose(["checkpoint.seconds=5", "checkpoint.every=3"])) == base == "d7378612aec1fba2"


def test_hashes_of_the_release_before_the_added_keys() -> None:
    # config_hash of these configs as computed by commit 176f6f5 (before real data, depth, init and log)
    for member, old in (([], "d7378612aec1fba2"), (["data=uniform", "seed=3", "activation=relu"], "9992ae3278182466"),
                        (["lr=0.01", "epochs=30", "batch_size=4", "shuffle=true"], "1b02b61dc412632e")):
        assert config_hash(compose(member)) == old


@pytest.mark.parametrize("override", ["model.depth=2", "model.init=he", "model.init=auto", "log.grad_norms=true",
                                      "log.every=5", "data=diabetes", "activation=relu"])
def test_a_key_away_from_its_legacy_value_changes_the_hash(override: str) -> None:
    assert config_hash(compose([override])) != config_hash(compose([]))
