"""model=module's torch side: build a member from model.target (imported by user_code.py), its
own module with weights drawn from its seed's "init" stream and the activation passed in
(model.act_arg: a class whose every call builds a fresh module) or swapped in by type (model.replace);
the check forward of validation (`probe`); and `StackedModules`, the stack whose members run one
after another in its step.

Exactness: member m's arithmetic is its own module's on its own rows; global random draws (a
user's nn.Dropout) come from the member's own stream (its seed's "dropout"), swapped in around its
forward; so a member trains in any stack as it does alone, bit for bit."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from activation_bench.data.synthetic import DTYPES, derived_seed
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models import module_sites
from activation_bench.engine.models.base import MemberLayers
from activation_bench.engine.models.module_io import expected_output, fit_output, shaped, take_output
from activation_bench.engine.models.user_code import code_record, import_target, last_line, replace_types
from activation_bench.errors import UsageError, at

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

PROBE_ROWS = 2  # the check forward's batch (two rows: batch norm's statistics need them)


class ActivationFactory:
    """Builds the compared activation: called as a class would be (timm's `act_layer(inplace=True)`,
    torchvision's `activation_layer()`), a fresh activation module per call, every argument
    (inplace, num_parameters, ...) ignored; model.replace calls it per swapped module, model.act_arg
    passes it as a class (`as_class`). Keeps what it built (the activation sites)."""

    def __init__(self, act: dict[str, Any]) -> None:
        self.act, self.made = act, []

    @property
    def built(self) -> int:
        return len(self.made)

    def __call__(self, *args: Any, **kwargs: Any) -> nn.Module:
        if any(isinstance(a, torch.Tensor) for a in args):
            raise TypeError("the model calls its activation argument on a tensor (a function such as F.relu); "
                            "model.act_arg passes a class-like factory of modules (try model.replace)")
        self.made.append(activations.create_from_config(self.act))
        return self.made[-1]

    def __repr__(self) -> str:
        return f"actbench activation factory ({self.act.get('name') or self.act.get('_target_')})"

    def as_class(self) -> type[nn.Module]:
        """The factory as model.act_arg passes it: a class, since models test what they are given as
        one (`issubclass(act_layer, nn.GELU)`, `isinstance(act_layer, type)`); calling it builds
        through this factory (`__new__` returns the fresh activation module, so its own `__init__`
        never runs)."""
        factory = self

        class ActbenchActivation(nn.Module):
            def __new__(cls, *args: Any, **kwargs: Any) -> nn.Module:  # type: ignore[misc]
                return factory(*args, **kwargs)

        return ActbenchActivation


def _activation_modules(net: nn.Module) -> str:
    """The activation modules a model holds, by type and count ('' where none), for model.replace's
    refusal: torch.nn's and any whose class or module is named like an activation."""
    counts: dict[str, int] = {}
    for mod in net.modules():
        cls = type(mod)
        if cls.__module__ == "torch.nn.modules.activation" or "activation" in cls.__module__.lower() \
                or cls.__name__.lower().endswith(("activation", "act", "relu", "gelu", "silu", "swish", "mish")):
            label = f"{cls.__module__.replace('torch.nn.modules.activation', 'torch.nn')}.{cls.__name__}"
            counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{k} x {v}" for k, v in counts.items())


def _swap(net: nn.Module, types: tuple[type, ...], factory: ActivationFactory) -> int:
    """Replace every child module of one of `types`, at any depth, by a fresh activation module."""
    n = 0
    for name, child in list(net.named_children()):
        if isinstance(child, types):
            setattr(net, name, factory())
            n += 1
        else:
            n += _swap(child, types, factory)
    return n


@dataclass(frozen=True)
class Sites:
    """Where the activation got in: "act_arg" (built through the constructor's argument) or
    "replace" (modules swapped by type), how many modules, their names in the model (the modules
    module_sites hooks; one the model does not register as a submodule has none), and the code
    that built them (`code_record`)."""

    way: str
    modules: int
    via: str  # the argument's name, or the replaced types
    names: tuple[str, ...] = ()
    code: dict[str, Any] = field(default_factory=dict, hash=False)

    def info(self) -> dict[str, Any]:
        return {"activation_sites": {"way": self.way, "via": self.via, "modules": self.modules},
                "code": dict(self.code)}


def construct(model: dict[str, Any], act: dict[str, Any], where: str = "") -> tuple[nn.Module, Sites]:
    """One instance of model.target with the activation in; UsageError with one line where it does
    not build, is not a module, or the activation reaches no module."""
    target = str(model["target"])
    build = import_target(target, where)
    factory = ActivationFactory(act)
    kwargs = dict(model.get("kwargs") or {})
    passed = factory.as_class() if model.get("act_arg") else None
    if passed is not None:
        kwargs[str(model["act_arg"])] = passed
    try:
        net = build(**kwargs)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code
        shown = ", ".join(f"{k}=" + ("<activation factory>" if v is passed else repr(v)) for k, v in kwargs.items())
        raise UsageError(f"model.target '{target}' failed to build with ({shown}): {last_line(exc)}"
                         f"{at(where)}") from None
    if not isinstance(net, nn.Module):
        raise UsageError(f"model.target '{target}' gave a {type(net).__name__}, not a torch.nn.Module (name a module "
                         f"class or a function returning one){at(where)}")
    if model.get("act_arg"):
        if not factory.built:
            held = _activation_modules(net)
            raise UsageError(f"model.target '{target}' never called model.act_arg={model['act_arg']}: no activation "
                             "module was built through it (the model may fix its activation itself"
                             + (f"; it holds {held}: try model.replace" if held else "") + f"){at(where)}")
        return net, Sites("act_arg", factory.built, str(model["act_arg"]), _names(net, factory.made),
                          code_record(target))
    names = [str(t) for t in model.get("replace") or []]
    n = _swap(net, replace_types(names, where), factory)
    if not n:
        held = _activation_modules(net)
        raise UsageError(f"model.replace=[{', '.join(names)}] matched no module of model.target '{target}'; it holds "
                         + (held if held else "no activation modules")
                         + " (functional calls such as F.relu cannot be reached by replacing modules)" + at(where))
    return net, Sites("replace", n, ", ".join(names), _names(net, factory.made), code_record(target))


def _names(net: nn.Module, made: list[nn.Module]) -> tuple[str, ...]:
    """The names of the modules in `made` among net's submodules (a shared one once)."""
    ids = {id(m) for m in made}
    return tuple(name for name, mod in net.named_modules() if id(mod) in ids)


class Member(nn.Module):
    """One member's module, with its own streams: global random draws during its forward (a
    user's nn.Dropout) come from `generator` (its seed's "dropout" stream, saved in checkpoints
    as every module's `generator` is), and a stochastic activation's from its "activation" stream."""

    def __init__(self, net: nn.Module, seed: int, device: str, sites: Sites) -> None:
        super().__init__()
        self.net, self.sites = net, sites
        self.generator = torch.Generator(device=device).manual_seed(derived_seed(seed, "dropout"))
        acts = torch.Generator(device=device).manual_seed(derived_seed(seed, "activation"))
        for mod in net.modules():
            if hasattr(mod, "generator") and (mod.generator is None or isinstance(mod.generator, torch.Generator)):
                mod.generator = acts
        self.cuda_rng = torch.device(device).type == "cuda"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        get = torch.cuda.get_rng_state if self.cuda_rng else torch.get_rng_state
        put = torch.cuda.set_rng_state if self.cuda_rng else torch.set_rng_state
        outside = get()
        put(self.generator.get_state())
        try:
            return self.net(x)
        finally:
            self.generator.set_state(get())
            put(outside)


class StackedModules(MemberLayers):
    """The stack of model=module: each member its own module, run one after another on its rows
    of x [M, N, ...] (flat features reshaped to `input_shape`), outputs stacked [M, N, ...]. Every
    parameter belongs to one member (`owners`: clipping per member); AdamW decays the matrices
    and kernels (dim >= 2, nanoGPT's rule). Its hidden layers are the activation sites (`depth`:
    the check forward's count; module_sites.py), units last on text (`last`); `row_values`: the
    values a unit-share pass holds per row (one member's forward at a time)."""

    def __init__(self, members: list[Member], input_shape: tuple[int, ...], expected: tuple[int, ...],
                 what: str, layout: tuple[int, bool, int] = (1, False, 1), *, repeat: bool = False,
                 output: str = "tensor") -> None:
        nn.Module.__init__(self)
        self.members = nn.ModuleList(members)
        self.input_shape, self.expected, self.what = input_shape, expected, what
        self.depth, self.last, self.row_values = layout
        self.repeat, self.output = repeat, output
        self.slices, self.norms = [], None

    def forward(self, x: torch.Tensor, record: list[torch.Tensor] | None = None,
                preacts: list[torch.Tensor] | None = None, batch_stats: bool | None = None) -> torch.Tensor:
        """Each member on its rows; with `preacts`, each site's input [M, samples, units] appended
        (module_sites.preacts)."""
        rows = x.shape[1]
        want = (rows, *self.expected[1:])
        if preacts is not None:
            outs, hs = module_sites.preacts(self, x, batch_stats)
            preacts.extend(hs)
        else:
            outs = [m(self.shaped(x[i])) for i, m in enumerate(self.members)]
        return torch.stack([fit_output(o, rows, want, self.what) for o in outs])

    def shaped(self, x: torch.Tensor) -> torch.Tensor:
        """One member's rows x [N, features] as its module takes them [N, *input_shape]."""
        return shaped(x, 1, self.input_shape, self.repeat)

    def site_masks(self, x: torch.Tensor) -> module_sites.Masks | None:
        """Per site, which units [M, units] are dead and saturated on every row of x (module_sites)."""
        return module_sites.sequential_masks(self, x)

    def per_member_params(self) -> int:
        return sum(p.numel() for p in self.members[0].parameters())

    def learned(self, m: int) -> list[dict[str, list[float]] | None]:
        """Per member, a learnable expression's values: one per activation site, in module order."""
        out: list[dict[str, list[float]] | None] = []
        for member in self.members:
            values = [mod.learned() for mod in member.net.modules() if callable(getattr(mod, "learned", None))]
            values = [v for v in values if v]
            out.append({k: [v[k] for v in values] for k in values[0]} if values else None)
        return out

    def member_modules(self) -> Iterator[tuple[int, nn.Module]]:
        """Every member's module is its own: all its parameters and buffers are that member's."""
        return enumerate(self.members)

    def decay_flags(self) -> list[bool]:
        return [p.dim() >= 2 for p in self.parameters()]

    def info(self) -> dict[str, Any] | None:
        """Where the activation got in, the sites the check forward called (summary.json's depth) and
        what the module's output was read as (module_io.OUTPUTS)."""
        return {**self.members[0].sites.info(), "depth": self.depth, "output": self.output}


def sample_rows(shape: Sequence[int], text: bool) -> torch.Tensor:
    """PROBE_ROWS rows of zeros in one sample's shape (token id 0 on text), in torch's default
    dtype as a module is built: what gives a lazy module its parameters' shapes (`materialize`)."""
    return torch.zeros(PROBE_ROWS, *shape, dtype=torch.long if text else None)


def forward_failed(target: str, shape: list[int], exc: BaseException) -> UsageError:
    """The one-line refusal of a model that raised in a check forward (its exception's last line;
    on gray images, where it speaks of channels, the way to give it three)."""
    hint = ("; data.channels=3 repeats the gray channel" if len(shape) == 4 and shape[1] == 1
            and "channel" in last_line(exc) else "")
    return UsageError(f"model.target '{target}' failed in a check forward on a batch of shape {shape}: "
                      f"{last_line(exc)}{hint}")


def materialize(net: nn.Module, sample: torch.Tensor, target: str) -> None:
    """Lazy modules (nn.LazyLinear, nn.LazyConv2d, ...) get their parameters at their first forward:
    run one on `sample`, without gradients and in eval mode (running statistics and dropout
    untouched; each module's own mode put back). Called while the global generator is seeded from
    the member's "init" stream, so lazy parameters come from the member's seed as the others do.
    A model without lazy parameters runs nothing here."""
    if not any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in net.modules()):
        return
    modes = [(m, m.training) for m in net.modules()]
    net.eval()
    try:
        with torch.no_grad():
            net(sample)
    except Exception as exc:  # noqa: BLE001 - user code
        raise forward_failed(target, list(sample.shape), exc) from None
    finally:
        for m, training in modes:
            m.training = training


def member(cfg: Cfg, device: str, dtype: torch.dtype, sample: torch.Tensor) -> Member:
    """A member's module: built on the CPU with the global generator seeded from its seed's "init"
    stream (the caller's random state untouched), its lazy modules materialized on `sample`
    (`sample_rows`), then moved to the device and dtype."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derived_seed(cfg.seed, "init"))
        net, sites = construct(dict(cfg.model), dict(cfg.activation))
        materialize(net, sample, str(cfg.model["target"]))
    return Member(net.to(device=device, dtype=dtype), cfg.seed, device, sites)


def build(ordered: Sequence[Cfg], device: str, dtype: torch.dtype) -> StackedModules:
    from activation_bench.data import text
    from activation_bench.data.shapes import model_input_shape

    first = ordered[0]
    expected, what = expected_output(first, 1)
    info = probe(first)  # the sites; on text their units are the inputs' last axis (module_sites)
    shape, is_text = model_input_shape(first), text.is_text(first.data)
    sample = sample_rows(shape, is_text)
    return StackedModules([member(c, device, dtype, sample) for c in ordered], shape, expected, what,
                          (len(info.site_widths), is_text, info.values_per_row), repeat=repeats(first),
                          output=info.output)


def repeats(cfg: Cfg) -> bool:
    """Whether the source's single channel is repeated to the module's channels (data.channels)."""
    from activation_bench.data.shapes import input_shape, model_input_shape

    source = input_shape(cfg)
    return source is not None and source[0] != model_input_shape(cfg)[0]


@dataclass(frozen=True)
class Probe:
    """What the check forward learned: one member's parameters and the values its modules' outputs
    hold per row (the memory estimate), where the activation got in, and each site's input values
    per row, in call order (module_sites: a module called twice is two sites), and what its output
    was read as (module_io.OUTPUTS)."""

    params: int
    values_per_row: int
    sites: Sites
    site_widths: tuple[int, ...]
    output: str = "tensor"


def probe(cfg: Cfg, where: str = "") -> Probe:
    """Build the model once (seed 0) and run it forward on PROBE_ROWS rows of the data's shape;
    UsageError with one line where it raises or its output is not the task's shape. Cached per
    model, activation and data shape."""
    from activation_bench.data import text
    from activation_bench.data.shapes import model_input_shape

    shape = model_input_shape(cfg)
    expected, what = expected_output(cfg, PROBE_ROWS)
    vocab = text.vocab_size(cfg) if text.is_text(cfg.data) else 0
    key = json.dumps([dict(cfg.model), dict(cfg.activation), shape, expected, what, vocab, cfg.dtype],
                     sort_keys=True, default=str)
    try:
        return _probe(key)
    except UsageError as exc:
        raise UsageError(f"{exc}{at(where)}") from None


@functools.lru_cache(maxsize=64)
def _probe(key: str) -> Probe:
    from activation_bench.cfg import Cfg

    model, act, shape, expected, what, vocab, dtype_name = json.loads(key)
    dtype = DTYPES[dtype_name]
    cfg = Cfg.wrap({"model": model, "activation": act, "seed": 0})
    m = member(cfg, "cpu", dtype, sample_rows(shape, bool(vocab)))
    gen = torch.Generator().manual_seed(0)
    x = (torch.randint(0, vocab, (PROBE_ROWS, *shape), generator=gen) if vocab
         else torch.randn(PROBE_ROWS, *shape, generator=gen, dtype=dtype))
    values, widths = [0], []

    def count(_mod: nn.Module, _inp: Any, out: Any) -> None:
        for t in (out if isinstance(out, (tuple, list)) else (out,)):  # attention layers return tuples
            if isinstance(t, torch.Tensor):
                values[0] += t.numel()

    hooks = [mod.register_forward_hook(count) for mod in m.modules()]
    try:
        with torch.no_grad(), module_sites.capture(m.net, m.sites.names, lambda _n, h: widths.append(h[0].numel())):
            out = m(x)
    except Exception as exc:  # noqa: BLE001 - user code
        raise forward_failed(model["target"], [PROBE_ROWS, *shape], exc) from None
    finally:
        for h in hooks:
            h.remove()
    try:
        fit_output(out, PROBE_ROWS, tuple(expected), what)
    except ValueError as exc:
        raise UsageError(f"model.target '{model['target']}' on a batch of shape {[PROBE_ROWS, *shape]}: {exc}") \
            from None
    params = sum(p.numel() for p in m.parameters())
    trainable = sum(p.numel() for p in m.parameters() if p.requires_grad)
    if not params:
        raise UsageError(f"model.target '{model['target']}' has no parameters: there is nothing to train")
    if trainable < params:
        raise UsageError(f"model.target '{model['target']}' has {params - trainable} of its {params} parameters "
                         "frozen (requires_grad=False); actbench trains every parameter of the module")
    return Probe(params, -(-values[0] // PROBE_ROWS), m.sites, tuple(widths), take_output(out, (), "")[1])


def seeded(cfg: Any, seed: int) -> Any:
    """A config of model, activation and seed alone: what `member` reads."""
    from activation_bench.cfg import Cfg

    return Cfg.wrap({"model": dict(cfg.model), "activation": dict(cfg.activation), "seed": seed})
