"""model.vmap=true (opt-in): model=module's members trained as one vectorised stack through
torch.func: their parameters and buffers stacked (`stack_module_state`: [M, ...] leaves the
stacked optimiser takes, batch norm's running statistics as stacked buffers updated in place) and
one `functional_call` of the module under `vmap` per step. Faster than members one after another
where each member's step is small (benchmarks/module_throughput.py), but not bit for bit a member's
run alone: under vmap the members' convolutions and products are batched kernels that round
differently from one member's (the measured tolerance: docs/your-own-model.md, tested in
tests/test_user_module.py). Random draws inside the module (nn.Dropout, rrelu) are refused: under
vmap they could not come from each member's own stream.

The activation sites' inputs (module_sites.py) come out of the vmapped call as its outputs, [M, ...]
each, and a site's activation is applied to them vmapped over the members' own parameters: the unit
shares and log.preact_stats as for members one after another."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from activation_bench.engine.diagnostics import activated_by
from activation_bench.engine.models import module_sites, user_module
from activation_bench.engine.models.base import MemberLayers
from activation_bench.engine.models.module_io import fit_output, shaped, take_output
from activation_bench.engine.models.user_code import last_line
from activation_bench.engine.models.user_module import Member
from activation_bench.errors import UsageError, at


class VmapStack(MemberLayers):
    """Members' modules as stacked tensors, run by one vmapped functional call of a template module
    (kept on the meta device, outside the state dict). depth, last, row_values: as StackedModules'
    (row_values: every member's site inputs and outputs at once)."""

    def __init__(self, members: list[Member], input_shape: tuple[int, ...], expected: tuple[int, ...],
                 what: str, layout: tuple[int, bool, int] = (1, False, 1), *, repeat: bool = False,
                 output: str = "tensor") -> None:
        nn.Module.__init__(self)
        nets = [m.net for m in members]
        params, buffers = stack_module_state(nets)
        self.template = [copy.deepcopy(nets[0]).to("meta")]  # a list: not a submodule
        self.param_names, self.buffer_names = list(params), list(buffers)
        self.stacked = nn.ParameterList(nn.Parameter(params[n].detach().clone()) for n in self.param_names)
        for i, n in enumerate(self.buffer_names):
            self.register_buffer(f"buffer_{i}", buffers[n].clone())
        self.sites = members[0].sites
        self.input_shape, self.expected, self.what = input_shape, expected, what
        self.depth, self.last, self.row_values = layout
        self.repeat, self.output = repeat, output
        self.slices, self.norms = [], None

    def train(self, mode: bool = True) -> VmapStack:
        super().train(mode)
        self.template[0].train(mode)
        return self

    def raw(self, x: torch.Tensor, sites: list[str] | None = None) -> Any:
        """Every member's module on its rows of x [M, N, ...], vmapped: the outputs stacked. With
        `sites`, (outputs, each site's input [M, N, ...]) and the sites' names appended to it."""
        m, rows = x.shape[:2]
        params, buffers = self._state("")
        template = self.template[0]

        def one(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], xi: torch.Tensor) -> Any:
            if sites is None:
                return take_output(functional_call(template, (p, b), (xi,)), self.expected, self.what)[0]
            got: list[torch.Tensor] = []
            with module_sites.capture(template, self.sites.names, lambda n, h: (sites.append(n), got.append(h))):
                out = functional_call(template, (p, b), (xi,))
            return take_output(out, self.expected, self.what)[0], got

        return vmap(one, randomness="error")(params, buffers, shaped(x, 2, self.input_shape, self.repeat))

    def _state(self, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The stacked parameters and buffers under `prefix` (a submodule's name and a dot), named
        relative to it."""
        k = len(prefix)
        params = {n[k:]: p for n, p in zip(self.param_names, self.stacked) if n.startswith(prefix)}
        buffers = {n[k:]: getattr(self, f"buffer_{i}") for i, n in enumerate(self.buffer_names) if n.startswith(prefix)}
        return params, buffers

    def site_masks(self, x: torch.Tensor) -> module_sites.Masks | None:
        """Per site, which units [M, units] are dead and saturated on every row of x: the sites'
        inputs from one vmapped pass, each site's activation vmapped over the members' own state."""
        names: list[str] = []
        with torch.no_grad():
            hs = self.raw(x, names)[1]
        if len(hs) != self.depth:
            return None
        return [activated_by(self._site(n), module_sites.as_units(h, self.last))[1] for n, h in zip(names, hs)]

    def _site(self, name: str) -> Any:
        """Site `name`'s activation on [M, ...], each member's with its own parameters."""
        mod = self.template[0].get_submodule(name)
        params, buffers = self._state(name + ".")
        return lambda t: vmap(lambda p, b, ti: functional_call(mod, (p, b), (ti,)))(params, buffers, t)

    def forward(self, x: torch.Tensor, record: list[torch.Tensor] | None = None,
                preacts: list[torch.Tensor] | None = None, batch_stats: bool | None = None) -> torch.Tensor:
        """The members vmapped; with `preacts`, each site's input [M, samples, units] appended."""
        rows = x.shape[1]
        if preacts is None:
            out = self.raw(x)
        else:
            names: list[str] = []
            with module_sites.batch_statistics(self.template[0].modules(), list(self.buffers())) if batch_stats \
                    else nullcontext():
                out, hs = self.raw(x, names)
            preacts.extend(module_sites.as_units(h, self.last) for h in hs if len(hs) == self.depth)
        want = (rows, *self.expected[1:])
        return torch.stack([fit_output(o, rows, want, self.what) for o in out.unbind(0)]) \
            if out.shape[1:] != want else out

    def per_member_params(self) -> int:
        return sum(p[0].numel() for p in self.stacked)

    def info(self) -> dict[str, Any] | None:
        return {**self.sites.info(), "depth": self.depth, "output": self.output}


def build(ordered: Any, device: str, dtype: torch.dtype) -> VmapStack:
    """The members (user_module.member, each from its seed) as one vmapped stack."""
    from activation_bench.data import text
    from activation_bench.data.shapes import model_input_shape

    first = ordered[0]
    expected, what = user_module.expected_output(first, 1)
    shape, is_text = model_input_shape(first), text.is_text(first.data)
    sample = user_module.sample_rows(shape, is_text)
    members = [user_module.member(c, device, dtype, sample) for c in ordered]
    info = user_module.probe(first)
    row_values = len(members) * (info.values_per_row + sum(info.site_widths))
    return VmapStack(members, shape, expected, what, (len(info.site_widths), is_text, row_values),
                     repeat=user_module.repeats(first), output=info.output)


def probe(cfg: Any, where: str = "") -> None:
    """model.vmap=true's check: two members through one vmapped forward in training mode (the
    step's) on a small batch; UsageError where the module draws random numbers or does what vmap
    cannot. Run after user_module.probe (the model builds and has the right output)."""
    from activation_bench.data import text
    from activation_bench.data.shapes import model_input_shape
    from activation_bench.data.synthetic import DTYPES

    target = cfg.model["target"]
    dtype = DTYPES[cfg.dtype]
    shape = model_input_shape(cfg)
    rows = user_module.PROBE_ROWS
    gen = torch.Generator().manual_seed(0)
    x = (torch.randint(0, text.vocab_size(cfg), (2, rows, *shape), generator=gen) if text.is_text(cfg.data)
         else torch.randn(2, rows, *shape, generator=gen, dtype=dtype))
    sample = user_module.sample_rows(shape, text.is_text(cfg.data))
    stack = VmapStack([user_module.member(user_module.seeded(cfg, s), "cpu", dtype, sample) for s in (0, 1)], shape,
                      (rows,), "")
    try:
        with torch.no_grad():
            stack.train().raw(x)
    except Exception as exc:  # noqa: BLE001 - user code under vmap
        if "random" in str(exc).lower():
            raise UsageError(f"model.vmap=true cannot run model.target '{target}': it draws random numbers (dropout, "
                             "a random activation), which under vmap could not come from each member's own stream; "
                             f"leave model.vmap off (members one after another, bit for bit){at(where)}") from None
        raise UsageError(f"model.vmap=true cannot run model.target '{target}' under torch.func.vmap: "
                         f"{last_line(exc)} (leave model.vmap off){at(where)}") from None
