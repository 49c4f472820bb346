"""model=mlp, the default family: Linear -> activation, depth times, then the output Linear (one
output for a regressor, K logits for a classifier). The stacked model is stacked_mlp.py; its
compiled step engine/compiled/mlp.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from activation_bench.engine.models.family import Family, Memory

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

NORMS = ("none", "batch", "layer")  # norm.py's MemberNorm
INITS = ("torch_default", "he", "lecun", "xavier", "auto")  # base.init_layer's, and auto (the activation's)


@dataclass
class MLPConfig:
    """model=mlp (configs/model/mlp.yaml): Linear -> activation, depth times, then the output Linear."""

    name: str = "mlp"
    hidden_dim: int = 64
    depth: int = 1  # hidden layers, each hidden_dim wide with the same activation
    init: str = "torch_default"  # torch_default | he | lecun | xavier | auto (the activation's recommendation)
    init_resolved: str | None = None  # the scheme that ran (model.init with auto resolved); set by validate
    dropout: float = 0.0  # dropout after every hidden activation (0 <= p < 1); off for validation and test
    norm: str = "none"  # none | batch | layer: normalization between each hidden Linear and its activation
    residual: bool = False  # each hidden layer after the first adds its input to its output


def widths(cfg: Cfg) -> tuple[int, int]:
    """(each hidden Linear's output width, the activation's output width): a gated unit halves."""
    from activation_bench.engine.activations import registry as activations

    return activations.hidden_width(dict(cfg.activation), cfg.model.hidden_dim)


class MLP(Family):
    name = "mlp"
    schema = MLPConfig
    trains_beside = True

    def validate(self, cfg: Cfg, where: str) -> None:
        from activation_bench.engine.models import checks as v
        from activation_bench.errors import check

        m = cfg.model
        check(m.norm in NORMS, f"unknown model.norm '{m.norm}'; valid: {', '.join(NORMS)}", where)
        v.check_dropout(m.dropout, where)
        check(m.hidden_dim >= 1, f"model.hidden_dim must be >= 1, got {m.hidden_dim}", where)
        check(m.depth >= 1, f"model.depth must be a positive integer (hidden layers), got {m.depth}", where)
        v.resolve_init(cfg, INITS, where)
        if m.norm == "batch":
            v.check_batch_rows(cfg, where)
        if m.residual and m.depth >= 2:
            v.check_residual_widths(cfg, where)

    def describe(self, model: dict[str, Any]) -> str:
        extra = [f"{model['norm']} norm"] if model.get("norm", "none") != "none" else []
        extra += ["residual"] if model.get("residual") else []
        extra += [f"dropout {model['dropout']:g}"] if model.get("dropout") else []
        return ", ".join([f"MLP {model['depth']} x {model['hidden_dim']}", *extra])

    def sizes(self, model: dict[str, Any]) -> str:
        return f"model.depth={model['depth']}, model.hidden_dim={model['hidden_dim']}"

    def layers(self, model: dict[str, Any]) -> int:
        return int(model["depth"])

    def summary(self, model: dict[str, Any]) -> dict[str, Any]:
        return {"depth": self.layers(model)}  # summaries have named MLPs by depth and width alone

    def run_row(self, model: dict[str, Any]) -> str | None:
        """Only where the model is not the default two-layer one."""
        if model["depth"] == 1 and model["init"] == "torch_default" and not model["dropout"]:
            return None
        init = model["init"] + (f" ({model['init_resolved']})" if model["init"] == "auto" else "")
        drop = f", dropout {model['dropout']:g}" if model["dropout"] else ""
        return f"{model['depth']} x {model['hidden_dim']} hidden, init {init}{drop}"

    def stack_key(self, cfg: Cfg) -> tuple:
        m = cfg.model
        h1, h2 = widths(cfg)
        return ("mlp", h1, h2, m.depth, float(m.dropout), m.norm, bool(m.residual))

    def memory(self, cfg: Cfg) -> Memory:
        from activation_bench.data.shapes import data_shapes, n_outputs

        n, n_val, n_test, dim = data_shapes(cfg)
        h1, h2 = widths(cfg)
        depth, k, normed = cfg.model.depth, n_outputs(cfg), cfg.model.norm != "none"
        params = dim * h1 + h1 + (depth - 1) * (h2 * h1 + h1) + (h2 + 1) * k + (depth * 2 * h1 if normed else 0)
        per_row = depth * (4 * h1 + 2 * h2 + (3 * h1 if normed else 0)) + 4
        return Memory(params, (n + n_val + n_test) * per_row, [h1] * depth)

    def macs(self, cfg: Cfg) -> int:
        from activation_bench.data.shapes import data_shapes, n_outputs

        hidden = cfg.model.hidden_dim  # the reference rate's units (compiled/choose.py)
        return (data_shapes(cfg)[3] + (cfg.model.depth - 1) * hidden + n_outputs(cfg)) * hidden

    def build(self, ordered: Sequence[Cfg], keys: list[str], device: str, dtype: Any) -> Any:
        from activation_bench.data.shapes import data_shapes, n_outputs
        from activation_bench.engine.models import stacked_mlp

        return stacked_mlp.build(ordered, keys, data_shapes(ordered[0])[3], device, dtype, n_outputs(ordered[0]))

    def compiled(self) -> Any:
        from activation_bench.engine.compiled import mlp

        return mlp

