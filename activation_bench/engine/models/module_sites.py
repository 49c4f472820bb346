"""model=module's activation sites seen from outside the user's module: each site's input (its
pre-activation) captured by forward pre-hooks on the activation modules actbench built or swapped in
(user_module.Sites.names), for the dead and saturated unit shares (diagnostics.activated_by, the
shipped families' definitions) and log.preact_stats (preact.unit_stats).

A site is a call: the sites are the calls of those modules in one forward, in call order, so a
module the forward calls twice (torchvision's BasicBlock calls its one ReLU twice) is two sites. The
check forward (user_module.probe) counts them; a pass whose forward calls them another number of
times (control flow on the data) records nothing (null shares, NaN statistics).

A site's units are its input's channels, every other axis more samples, as the shipped convnet and
transformer count them: [N] has one unit, [N, F] F; [N, C, ...] (convolutions: images, sequences) has C,
each over every sample and position; on text, [N, T, F] has F, each over every sample and position
(a transformer's feed-forward layout)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from activation_bench.engine.diagnostics import activated_by, combine

Masks = list[tuple[torch.Tensor, torch.Tensor | None]]


def as_units(h: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """A site's input h [M, N, ...] as [M, samples, units] (the module docstring's units; [M, N]:
    one unit)."""
    if h.dim() == 2:
        h = h[..., None]
    if h.dim() > 3 and not channels_last:
        h = h.movedim(2, -1)
    return h.reshape(h.shape[0], -1, h.shape[-1])


@contextmanager
def capture(net: nn.Module, names: Sequence[str], take: Callable[[str, torch.Tensor], None]) -> Iterator[None]:
    """take(name, input) at every call of net's site modules `names` while the block runs."""
    def hook(name: str) -> Callable[..., None]:
        def pre(_mod: nn.Module, args: tuple[Any, ...]) -> None:
            if args and isinstance(args[0], torch.Tensor):
                take(name, args[0])
        return pre

    handles = [net.get_submodule(n).register_forward_pre_hook(hook(n)) for n in names]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def batch_statistics(modules: Iterator[nn.Module], buffers: list[torch.Tensor]) -> Iterator[None]:
    """Batch norm on the batch's own statistics in evaluation mode (preact.py's probe pass): its
    modules in training mode for the block, every buffer put back bit for bit afterwards."""
    norms = [m for m in modules if isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training]
    saved = [b.clone() for b in buffers]
    for m in norms:
        m.train()
    try:
        yield
    finally:
        for m in norms:
            m.eval()
        with torch.no_grad():
            for b, s in zip(buffers, saved):
                b.copy_(s)


def member_inputs(stack: Any, i: int, x: torch.Tensor, on: Callable[[str, torch.Tensor], Any]
                  ) -> tuple[Any, list[Any] | None]:
    """Member i's output on its rows x [N, ...] (no gradient) and on(name, h [1, samples, units])
    for each of its sites in call order (None where the forward calls them other than depth times)."""
    member, got = stack.members[i], []
    with capture(member.net, member.sites.names, lambda n, h: got.append(on(n, as_units(h[None], stack.last)))):
        with torch.no_grad():
            out = member(stack.shaped(x))
    return out, got if len(got) == stack.depth else None


def _masks(stack: Any, i: int, x: torch.Tensor) -> Masks | None:
    """Member i's masks [1, units] per site, computed as each site is called (its input not kept)."""
    net = stack.members[i].net

    def masks(name: str, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        with torch.enable_grad():  # the slope's backward, inside the forward's no_grad
            return activated_by(net.get_submodule(name).forward, h)[1]  # forward: not the hook again

    return member_inputs(stack, i, x, masks)[1]


def _joined(per_member: list[Masks], depth: int) -> Masks:
    """Members' masks [1, units] per site as [M, units] (saturated None where any is)."""
    out: Masks = []
    for k in range(depth):
        sat = [m[k][1] for m in per_member]
        out.append((torch.cat([m[k][0] for m in per_member]),
                    torch.cat(sat) if all(s is not None for s in sat) else None))  # type: ignore[arg-type]
    return out


def sequential_masks(stack: Any, x: torch.Tensor) -> Masks | None:
    """StackedModules' site masks [M, units] on x [M, N, ...]: each member's forward in turn."""
    per_member = [_masks(stack, i, x[i]) for i in range(x.shape[0])]
    return None if any(mk is None for mk in per_member) else _joined(per_member, stack.depth)  # type: ignore[arg-type]


def unit_shares(stack: Any, x: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per site and member, the shares [depth, M] of dead and saturated units on every sample of x
    [M, N, ...], in chunks of `rows` (stack.site_masks per chunk, diagnostics.combine); NaN where a
    forward's calls differ from the check forward's; [0, M] where it calls none."""
    if not stack.depth:
        empty = torch.zeros((0, x.shape[0]), dtype=torch.float64)
        return empty, empty
    chunks = []
    for part in x.split(rows, dim=1):
        masks = stack.site_masks(part)
        if masks is None:
            nan = torch.full((stack.depth, x.shape[0]), float("nan"), dtype=torch.float64)
            return nan, nan
        chunks.append(masks)
    return combine(chunks, stack.depth, x.dtype if x.is_floating_point() else next(stack.parameters()).dtype)


def preacts(stack: Any, x: torch.Tensor, batch_stats: bool | None) -> tuple[list[Any], list[torch.Tensor]]:
    """StackedModules' members' outputs on x [M, N, ...] and each site's input as [M, samples,
    units] (preact.py's log; none where a member's forward calls its sites other than depth
    times). batch_stats: batch norm on the batch's statistics in evaluation mode, as MemberLayers'."""
    with batch_statistics(stack.modules(), list(stack.buffers())) if batch_stats else nullcontext():
        runs = [member_inputs(stack, i, x[i], lambda _n, h: h) for i in range(x.shape[0])]
    outs, per_member = [r[0] for r in runs], [r[1] for r in runs]
    if any(p is None for p in per_member):
        return outs, []
    return outs, [torch.cat([p[k] for p in per_member]) for k in range(stack.depth)]  # type: ignore[index]
