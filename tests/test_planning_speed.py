"""Planning's shortcuts give exactly what the plain algorithms gave: compose_many validating members
that differ only in their seed once (config/compose.py), and config_hash leaving the legacy keys out
without copying the config (config/hashing.py), against the key-by-key algorithm it replaced."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from activation_bench.cfg import Cfg
from activation_bench.config.compose import compose_many
from activation_bench.config.hashing import LEGACY_DEFAULTS, NOT_HASHED, config_hash
from activation_bench.errors import UsageError


def _reference_hash(cfg: dict) -> str:
    """config_hash as it was before planning was made cheaper (a deep copy, then each group's keys
    checked and dropped one by one): every run's identity, which resume matches on."""
    absent = object()

    def holds(doc: dict, dotted: str, value: Any) -> bool:
        *parents, last = dotted.split(".")
        for part in parents:
            doc = doc.get(part, {})
            if not isinstance(doc, dict):
                return False
        found = doc.get(last, absent)
        return found is absent or (type(found) is type(value) and found == value)

    def drop(doc: dict, dotted: str) -> None:
        *parents, last = dotted.split(".")
        nodes = [doc]
        for part in parents:
            node = nodes[-1].get(part)
            if not isinstance(node, dict):
                return
            nodes.append(node)
        nodes[-1].pop(last, None)
        for node, part in reversed(list(zip(nodes[:-1], parents))):
            if not node[part]:
                node.pop(part)

    doc = copy.deepcopy(cfg)
    if doc.get("engine") == "auto":  # the default since #68 hashes as eager, the default before it
        doc["engine"] = "eager"
    for key in NOT_HASHED:
        doc.pop(key, None)
    for group in LEGACY_DEFAULTS:
        if all(holds(doc, key, value) for key, value in group.items()):
            for key in group:
                drop(doc, key)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, allow_nan=True).encode()).hexdigest()[:16]


def _exact(value: Any) -> Any:
    """A value with its types and key order spelled out (Cfg is not dict, 1 is not 1.0 or True)."""
    if isinstance(value, dict):
        return type(value).__name__, [(k, _exact(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_exact(v) for v in value]
    return type(value).__name__, repr(value)


# varied data, model and activation groups, legacy keys at their legacy values and away from them,
# each at three seeds (the copies of a validated config) and once without a seed override
_BASES = [
    [],
    ["activation=relu", "model.init=auto"],
    ["activation=gelu", "model.depth=2", "model.norm=layer", "model.residual=true", "model.dropout=0.1"],
    ["data=uniform", "log.grad_norms=true", "log.every=5", "log.train_eval=true", "log.preact_stats=2"],
    ["data=normal", "engine=compiled", "optimizer=sgd", "momentum=0.9", "nesterov=true", "grad_clip=1.0"],
    ["data=diabetes", "batch_size=32", "weight_decay=0.01", "beta2=0.99", "schedule=cosine", "warmup_steps=5"],
    ["data=diabetes", "data.standardize=false", "data.val_fraction=0.25", "data.test_fraction=0.25"],
    ["data=function", "data.fn=xy", "activation=tanh", "model.init=xavier"],
    ["data=digits", "model.init=auto", "activation=silu", "data.n_train=200"],
    ["data=mnist1d", "model=cnn", "activation=elu", "checkpoint.every=2"],
    # tiny shakespeare's stand-in (`stand_in_shakespeare`): the real file's checksum not asked for
    ["data=shakespeare", "data.sha256=null", "model=transformer", "batch_size=4", "model.n_layer=1",
     "activation=swiglu"],
    ["activation=expr", 'activation.fn="x*sigmoid(beta*x)"', "+activation.beta=1.5", "dtype=float64"],
    ["activation=leaky_relu", "activation.negative_slope=0.2", "seed=9", "lr=0.01"],  # a seed before others
]
_MEMBERS = [[*base, f"seed={s}"] for base in _BASES for s in (0, 1, 7)] + [list(base) for base in _BASES]


@pytest.fixture(scope="module")
def stand_in_shakespeare() -> None:
    """A small text where data=shakespeare looks by default (the suite's temporary cache: conftest's
    _no_user_cache), so that composing it reads no file of the user's."""
    folder = Path(os.environ["ACTBENCH_CACHE_DIR"]) / "shakespeare_char"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input.txt").write_text("First Citizen:\nSpeak, speak.\n\n" * 200, encoding="utf-8")


@pytest.fixture(scope="module")
def composed(stand_in_shakespeare) -> list[Cfg]:
    return compose_many(_MEMBERS)


def test_members_differing_in_the_seed_come_out_as_composed_alone(composed):
    """A member copied from one validated already (same overrides but the seed) equals the member
    composed and validated in full, types and key order included (with what validation derived:
    model.init_resolved, data.root, ...). Composed in the reverse order, the members validated in
    full (the first of their overrides but the seed) are others: seed 0's and seed 7's configs come
    once from either way."""
    backward = compose_many(_MEMBERS[::-1])[::-1]
    assert [_exact(c) for c in backward] == [_exact(c) for c in composed]
    assert [c["seed"] for c in composed[:3]] == [0, 1, 7]
    assert composed[1]["model"]["init_resolved"] == "torch_default"
    assert composed[3]["model"]["init_resolved"] == composed[5]["model"]["init_resolved"] not in (None, "auto")
    for a, b in zip(composed, composed[1:]):  # no two members share a subtree
        assert a is not b and a["data"] is not b["data"] and a["model"] is not b["model"]


def test_seed_overrides_given_twice_or_not_at_all():
    cfgs = compose_many([["lr=0.1"], ["lr=0.1", "seed=3"], ["seed=4", "lr=0.1", "seed=5"], ["lr=0.1"],
                         ["seed=3", "lr=0.1"]])
    default = compose_many([[]])[0]["seed"]
    assert [c["seed"] for c in cfgs] == [default, 3, 5, default, 3]
    assert _exact(cfgs[0]) == _exact(cfgs[3])


@pytest.mark.parametrize("members, message", [
    ([["lr=0.1", "seed=1"], ["lr=0.1", "seed=-1"]], r"seed must be >= 0, got -1 \(in: lr=0.1 seed=-1\)"),
    ([["seed=1"], [f"seed={2**63}"]], rf"seed must be at most 2\*\*63-1 .*\(in: seed={2**63}\)"),
    ([["lr=0.1", "seed=1"], ["lr=0.1", "seed=abc"]], r"invalid override 'seed=abc'"),
    ([["seed=1"], ["seed=2", "epochs=0"]], r"epochs must be a positive integer, got 0 \(in: seed=2 epochs=0\)"),
])
def test_a_bad_member_after_a_validated_one_is_named(members, message):
    """The seed's own checks run for every member (and name it); anything else is checked in full."""
    with pytest.raises(UsageError, match=message):
        compose_many(members)


def test_config_hash_equals_the_key_by_key_algorithm(composed):
    """Every composed config, and variants with legacy keys absent, emptied or replaced subtrees,
    hash as the algorithm before (runs resume by hash)."""
    variants: list[dict] = []
    for cfg in composed:
        variants.append(cfg)
        doc = copy.deepcopy(cfg)
        for group in LEGACY_DEFAULTS[::2]:  # legacy keys missing (absent counts as the legacy value)
            for key in group:
                *parents, last = key.split(".")
                node = doc
                for part in parents:
                    node = node.get(part, {})
                node.pop(last, None)
        variants.append(doc)
        variants.append({**cfg, "data": {k: v for k, v in cfg["data"].items() if k in ("path", "fn", "task")}})
        variants.append({**cfg, "data": {}, "log": 3})  # an empty subtree, a legacy key's parent not a dict
        variants.append({k: v for k, v in cfg.items() if k not in ("model", "engine", "checkpoint")})
        variants.append({**cfg, "engine": 0, "weight_decay": False, "beta2": 0.999, "model": {"depth": 1.0}})
        variants.append({**cfg, "engine": "eager"})  # the hash of the default, auto
    hashes = [config_hash(Cfg.wrap(v)) for v in variants]
    assert hashes == [_reference_hash(v) for v in variants]
    assert len(set(hashes)) > len(composed) // 2  # the variants are not all alike
    before = [_exact(v) for v in variants]
    for v in variants:
        config_hash(v)
    assert [_exact(v) for v in variants] == before  # the config is left as it was


def test_hydra_compositions_kept_for_the_process_follow_the_config_files(tmp_path, monkeypatch):
    """A composition kept from an earlier call is used only while the config folder's files are
    the same: an edited file is composed afresh, and each call gets its own copy to check on."""
    import shutil

    from activation_bench.config import compose, files

    root = tmp_path / "configs"
    shutil.copytree(files.config_dir(), root)
    monkeypatch.setattr(files, "config_dir", lambda: root)
    monkeypatch.setattr(compose, "config_dir", lambda: root)
    members = [["lr=0.5"], ["epochs=3"], ["model.depth=2", "seed=1"]]
    first = compose_many(members)
    assert compose_many(members) == first and [c["lr"] for c in first] == [0.5, 0.001, 0.001]
    text = (root / "config.yaml").read_text()
    (root / "config.yaml").write_text(text.replace("\nlr: 0.001 ", "\nlr: 0.002 "))
    assert [c["lr"] for c in compose_many(members)] == [0.5, 0.002, 0.002]
    mlp = root / "model" / "mlp.yaml"
    mlp.write_text(mlp.read_text().replace("\ndepth: 1 ", "\ndepth: 3 "))
    assert [c["model"]["depth"] for c in compose_many(members)] == [3, 3, 2]


def test_spliced_options_kept_for_the_process_follow_the_config_files(tmp_path, monkeypatch):
    """An option composed without Hydra (data=uniform, kept by compose._option) is read afresh when
    its file changes, and the type check of its keys works on a copy each time."""
    import shutil

    from activation_bench.config import compose, files

    root = tmp_path / "configs"
    shutil.copytree(files.config_dir(), root)
    monkeypatch.setattr(files, "config_dir", lambda: root)
    monkeypatch.setattr(compose, "config_dir", lambda: root)
    members = [["data=uniform", "data.n_samples=7"], ["data=uniform"]]
    first = compose_many(members)
    assert compose_many(members) == first and [c["data"]["n_samples"] for c in first] == [7, 10]
    uniform = root / "data" / "uniform.yaml"
    uniform.write_text(uniform.read_text().replace("\nn_samples: 10", "\nn_samples: 12"))
    assert [c["data"]["n_samples"] for c in compose_many(members)] == [7, 12]


def test_kept_compositions_resolve_an_interpolating_file_again_at_each_call(tmp_path, monkeypatch):
    """A kept composition is reused with its resolved values only while no config file interpolates:
    a file reading the environment (${oc.env:...}) gives each call the value of its moment, for
    Hydra's compositions and for options composed without Hydra alike."""
    import shutil

    from activation_bench.config import compose, files

    root = tmp_path / "configs"
    shutil.copytree(files.config_dir(), root)
    monkeypatch.setattr(files, "config_dir", lambda: root)
    monkeypatch.setattr(compose, "config_dir", lambda: root)
    uniform = root / "data" / "uniform.yaml"
    uniform.write_text(uniform.read_text().replace("\nn_samples: 10", "\nn_samples: ${oc.env:ACTBENCH_TEST_N,10}"))
    config = root / "config.yaml"
    config.write_text(config.read_text().replace("\nepochs: 1000 ", "\nepochs: ${oc.env:ACTBENCH_TEST_N,1000} "))
    members = [["data=uniform", "seed=1", "lr=0.5"], ["seed=2"]]
    for n in ("7", "9"):
        monkeypatch.setenv("ACTBENCH_TEST_N", n)
        got = compose_many(members)
        assert [c["data"]["n_samples"] for c in got] == [int(n), 10] and [c["epochs"] for c in got] == [int(n)] * 2
        assert [c["lr"] for c in got] == [0.5, 0.001]  # a scalar checked in one call stays out of the next


def test_scalar_values_checked_once_per_process_keep_their_types_and_refusals():
    """compose._TYPED keeps a plain override's checked value for later calls: the schema's type
    (lr=1 is the float 1.0, epochs=2 the int 2) in every call, and a refused value is refused in
    every call, not kept."""
    from activation_bench.config import compose

    for _ in range(2):
        cfg = compose_many([["lr=1", "epochs=2", "seed=3"]])[0]
        assert (cfg["lr"], cfg["epochs"], cfg["seed"]) == (1.0, 2, 3)
        assert type(cfg["lr"]) is float and type(cfg["epochs"]) is int
        with pytest.raises(UsageError, match="epochs=abc"):
            compose_many([["epochs=abc"]])
    assert any(k[2] == "lr=1" for k in compose._TYPED) and not any(k[2] == "epochs=abc" for k in compose._TYPED)
