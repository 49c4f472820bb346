"""What the rest of the code asks of a model family (`Family`), and a member's size for the memory
estimate (`Memory`). Each family module subclasses Family; registry.py registers them. No torch at
import: a family's configuration side is plain arithmetic, its torch side imported when asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


@dataclass(frozen=True)
class Memory:
    """One member's size for the memory estimate (runs/memory.py, engine/plan.py `member_bytes`):
    its parameters, the most activation values training and evaluation hold at once, and each
    hidden layer's pre-activation width (the gradient-norm and pre-activation logs)."""

    params: int
    activations: int
    widths: list[int]


class Family:
    """What the rest of the code asks of a model family. Subclasses set `name` and `schema` and
    override what differs; the defaults suit a family with no hidden-layer diagnostics."""

    name: str = ""
    schema: type = object  # the dataclass Hydra checks model.* against (configs/model/NAME.yaml extends it)
    eval_rows: int | None = None  # evaluation passes take this many rows at a time (None: a split at once)
    # two of its eager CPU stacks may train at once, in two threads of one process (runs/beside.py):
    # its torch side draws from its members' own generators only and keeps no state between stacks
    trains_beside: bool = False

    # -- configuration side (no torch) --
    def validate(self, cfg: Cfg, where: str) -> None:
        """The family's own keys, and the data they are asked to model; UsageError with one line."""

    def describe(self, model: dict[str, Any]) -> str:
        """The architecture in one line (run summaries, reports, the memory check)."""
        return str(model.get("name"))

    def sizes(self, model: dict[str, Any]) -> str:
        """The keys that set a member's size, for the memory check's refusal (default: `describe`)."""
        return self.describe(model)

    def layers(self, model: dict[str, Any]) -> int:
        """Hidden layers (blocks) whose units the diagnostics log: summary.json's `depth`."""
        return 1

    def summary(self, model: dict[str, Any]) -> dict[str, Any]:
        """summary.json's model fields: its depth and, where a line says more, the description."""
        return {"depth": self.layers(model), "model": self.describe(model)}

    def run_row(self, model: dict[str, Any]) -> str | None:
        """The run summary's `model` row (None: no row)."""
        init = f", init {model['init_resolved']}" if model.get("init_resolved") else ""
        return self.describe(model) + init

    def info_rows(self, info: dict[str, Any] | None) -> list[tuple[str, str]]:
        """The run summary's rows of the built model's facts (RunResult.model_info); none by default."""
        return []

    def stack_key(self, cfg: Cfg) -> tuple:
        """The model's shapes and settings: members with equal keys (and equal data and optimiser
        settings) train in one stack."""
        raise NotImplementedError

    def memory(self, cfg: Cfg) -> Memory:
        raise NotImplementedError

    def macs(self, cfg: Cfg) -> int:
        """Forward multiply-adds per sample (engine=auto's estimate of eager training time)."""
        raise NotImplementedError

    # -- torch side (imports torch when called) --
    def build(self, ordered: Sequence[Cfg], keys: list[str], device: str, dtype: Any) -> Any:
        """The stacked model of these members (a `base.MemberLayers`), each drawn from its seed."""
        raise NotImplementedError

    def pads_alone(self, cfg: Cfg, device: str, dtype: Any) -> bool:
        """Whether a run alone trains as a stack of itself and a copy (engine/train.py): the default,
        so that its batched products take the same path as in any sweep's stack."""
        return True

    def compiled(self) -> Any | None:
        """The module of this family's compiled step (engine/compiled/), or None: eager only."""
        return None

    def unit_shares(self, model: Any, x: Any) -> tuple[Any, Any]:
        """Per hidden layer and member, the share of dead and of saturated units on the training
        inputs x, each [depth, M] (diagnostics.unit_shares: summary.json's dead_units and
        saturated_units)."""
        from activation_bench.engine.diagnostics import unit_shares

        return unit_shares(model, x)
