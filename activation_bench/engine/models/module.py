"""model=module: a user's own torch.nn.Module (model.target=module:attribute) with the compared
activation passed in through its constructor (model.act_arg, timm's `act_layer` convention) or
swapped in by module type after construction (model.replace). The configuration side is here (no
torch at import); the torch side is user_code.py (importing the target, identifying its code) and
user_module.py (building members, the check forward). Members train one after another inside the
stack's step, each its own module instance, so a member of a sweep is its run alone bit for bit
(docs/your-own-model.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from activation_bench.engine.models.family import Family, Memory
from activation_bench.host import describe_code

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

EVAL_ROWS = 1000  # evaluation passes take this many rows at a time (a user's convnet on a whole split)


@dataclass
class ModuleConfig:
    """model=module (configs/model/module.yaml)."""

    name: str = "module"
    target: str | None = None  # module:attribute, a class or a function returning an nn.Module
    kwargs: dict[str, Any] = field(default_factory=dict)  # constructor keyword arguments
    act_arg: str | None = None  # the constructor's activation argument (act_layer, activation_layer)
    replace: list[str] | None = None  # module types replaced by the activation (torch.nn.ReLU, ...)
    vmap: bool = False  # opt-in: members as one torch.func stack (faster, not bit for bit their runs alone)


def way(model: dict[str, Any]) -> str:
    """How the activation gets in, in words (descriptions, the run summary)."""
    if model.get("act_arg"):
        return f"through {model['act_arg']}="
    return "replacing " + ", ".join(str(t) for t in model.get("replace") or [])


def _kwargs(model: dict[str, Any]) -> dict[str, Any]:
    return dict(model.get("kwargs") or {})


class Module(Family):
    name = "module"
    schema = ModuleConfig
    eval_rows = EVAL_ROWS

    def pads_alone(self, cfg: Cfg, device: str, dtype: Any) -> bool:
        """Never: members share no arithmetic (each its own module, run one after another), so a run
        alone needs no padding copy."""
        return False

    def validate(self, cfg: Cfg, where: str) -> None:
        """The keys, the activation (elementwise only), the logs it cannot give, then the model
        itself: imported, built and run forward once on a small batch (user_module.probe)."""
        from activation_bench.engine.activations import registry as activations
        from activation_bench.errors import check

        m = cfg.model
        check(bool(m.target), "model=module needs model.target=module:attribute (a class or a function returning a "
              "torch.nn.Module), e.g. model.target=mymodels:ResNet20", where)
        check(bool(m.act_arg) or bool(m.replace), "model=module needs model.act_arg=NAME (the constructor's "
              "activation argument, as timm's act_layer) or model.replace=[torch.nn.ReLU, ...] (modules swapped "
              "by type)", where)
        check(not (m.act_arg and m.replace), "model.act_arg and model.replace are two ways in: give one", where)
        act = dict(cfg.activation)
        check(not activations.is_gated(act), f"activation={act.get('name')} is gated (act(a) * b on two halves of "
              "a layer twice as wide) and actbench cannot change a layer's width inside model.target's module; "
              "choose an elementwise activation", where)
        check(not cfg.log.grad_norms, "log.grad_norms needs the shipped families' layers: it pairs each hidden "
              "layer's weight gradient with its activation output, and model=module cannot tell which of "
              "model.target's weights feeds which activation site (it would need the model to name each site's "
              "weight); log.preact_stats=K logs each site's input", where)
        from activation_bench.data import text

        check(not (cfg.log.preact_stats and text.is_text(cfg.data)), "log.preact_stats probes the training split's "
              "first rows, and a text's split is one stream of characters (model=transformer refuses it too); "
              "model=module logs it on tables, images and sequences", where)
        from activation_bench.engine.models import user_module

        user_module.probe(cfg, where)
        if m.get("vmap"):
            from activation_bench.engine.models import vmap_stack

            vmap_stack.probe(cfg, where)

    def describe(self, model: dict[str, Any]) -> str:
        args = ", ".join(f"{k}={v}" for k, v in _kwargs(model).items())
        return f"{model.get('target')}({args}), activation {way(model)}"

    def info_rows(self, info: dict[str, Any] | None) -> list[tuple[str, str]]:
        """'activation sites: 9 modules built through act_layer' (or '... replaced (torch.nn.ReLU)'),
        what the output was read as ('output: logits'; module_io.OUTPUTS) and the code
        (host.describe_code)."""
        sites = (info or {}).get("activation_sites")
        if not sites:
            return []
        n = sites["modules"]
        how = f"built through {sites['via']}" if sites["way"] == "act_arg" else f"replaced ({sites['via']})"
        rows = [("activation sites", f"{n} module{'s' if n != 1 else ''} {how}")]
        if (info or {}).get("output"):
            rows.append(("output", str(info["output"])))  # type: ignore[index]
        code = (info or {}).get("code") or {}
        if code.get("sha256"):
            rows.append(("code", describe_code(code)))
        return rows

    def layers(self, model: dict[str, Any]) -> int:
        """Not known from model.* alone: the activation sites are counted by the check forward on
        the data's shape, so summary.json's depth comes from the built stack's info (its sites)."""
        return 1

    def stack_key(self, cfg: Cfg) -> tuple:
        """The module and the activation: a stack holds members of one architecture."""
        from activation_bench.data.shapes import model_input_shape

        m = cfg.model
        return ("module", m.target, json.dumps(_kwargs(m), sort_keys=True, default=str), m.act_arg,
                tuple(m.replace or ()), bool(m.get("vmap")), model_input_shape(cfg),
                json.dumps(dict(cfg.activation), sort_keys=True))

    def memory(self, cfg: Cfg) -> Memory:
        """Parameters, and the values every module's output holds per sample in the check forward
        (twice: kept for backward and their gradients), for the batch and an evaluation chunk; with
        log.preact_stats every site's input on the probe rows at once. Widths: each site's values
        per sample."""
        from activation_bench.data.shapes import data_shapes
        from activation_bench.engine.models import user_module
        from activation_bench.engine.preact import PROBE_ROWS

        info = user_module.probe(cfg, "")
        n, n_val, n_test, _ = data_shapes(cfg)
        rows = min(cfg.batch_size or n, n) * 2 + min(max(n_val, n_test, n), EVAL_ROWS)
        probe = min(n, PROBE_ROWS) * sum(info.site_widths) if cfg.log.preact_stats else 0
        return Memory(info.params, rows * info.values_per_row + probe, list(info.site_widths))

    def macs(self, cfg: Cfg) -> int:
        return 0  # eager only (no compiled step): engine=auto never asks

    def build(self, ordered: Sequence[Cfg], keys: list[str], device: str, dtype: Any) -> Any:
        if ordered[0].model.get("vmap"):
            from activation_bench.engine.models import vmap_stack

            return vmap_stack.build(ordered, device, dtype)
        from activation_bench.engine.models import user_module

        return user_module.build(ordered, device, dtype)

    def unit_shares(self, model: Any, x: Any) -> tuple[Any, Any]:
        """Per activation site (module_sites.py), the shipped families' dead and saturated shares,
        in chunks of rows whose site inputs hold at most diagnostics.SHARE_BYTES."""
        from activation_bench.data.text import fixed_windows
        from activation_bench.engine.diagnostics import SHARE_BYTES
        from activation_bench.engine.models import module_sites
        from activation_bench.engine.models.transformer import SHARE_WINDOWS

        if model.last:  # text: x is the training split's characters [M, n]; model=transformer's windows
            x = fixed_windows(x, model.input_shape[0], SHARE_WINDOWS)
        per_row = max(1, model.row_values) * x.element_size()
        return module_sites.unit_shares(model, x, max(1, min(EVAL_ROWS, SHARE_BYTES // per_row)))

