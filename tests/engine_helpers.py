"""Shared by the engine's equivalence tests: every member of a grid trained stacked and alone."""

from __future__ import annotations

from activation_bench.config.compose import compose_many
from activation_bench.config.grid import expand
from activation_bench.engine import plan, train


def stacked_and_alone(overrides: list[str]) -> list[tuple[dict, train.RunResult, train.RunResult]]:
    """(labels, the member trained alone, the member trained in its sweep's stacks) per member."""
    grid = expand(overrides)
    cfgs = compose_many(grid.members)
    stacked: dict[int, train.RunResult] = {}
    for stack in plan.plan_stacks(cfgs):
        for i, res in zip(stack, train.train([cfgs[i] for i in stack])):
            stacked[i] = res
    return [(grid.labels[i], train.train([cfg])[0], stacked[i]) for i, cfg in enumerate(cfgs)]
