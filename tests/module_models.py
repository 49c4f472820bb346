"""Models for model=module's tests, written as a user would (imported by model.target)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ActNet(nn.Module):
    """timm's convention: `act_layer` a class, called as act_layer(inplace=True). A conv-BN-act
    stem, dropout, and a linear head on [N, 1, 8, 8] images."""

    def __init__(self, act_layer: type = nn.ReLU, width: int = 8, n_out: int = 10, dropout: float = 0.1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, width, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.act = act_layer(inplace=True)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(width * 16, 16)
        self.act2 = act_layer()
        self.head = nn.Linear(16, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[1:] == (1, 8, 8), x.shape
        x = F.max_pool2d(self.drop(self.act(self.bn(self.conv(x)))), 2)
        return self.head(self.act2(self.fc(x.flatten(1))))


class Fixed(nn.Module):
    """A model that hard-codes nn.ReLU modules (torchvision's ResNet does): model.replace's case.
    Tables: [N, features]."""

    def __init__(self, n_in: int = 4, n_out: int = 3, hidden: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(inplace=True))
        self.head = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dim() == 2, x.shape
        return self.head(self.body(x))


def fixed(n_in: int = 4, n_out: int = 3) -> nn.Module:
    """A function returning a module."""
    return Fixed(n_in, n_out)


class Seq1d(nn.Module):
    """[N, C, L] sequences (MNIST-1D)."""

    def __init__(self, act_layer: type = nn.ReLU) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5, stride=2)
        self.act = act_layer()
        self.head = nn.Linear(4 * 18, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[1:] == (1, 40), x.shape
        return self.head(self.act(self.conv(x)).flatten(1))


class TinyLM(nn.Module):
    """Token ids [N, T] -> logits [N, T, vocab]."""

    def __init__(self, vocab: int, act_layer: type = nn.ReLU, dim: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 16), act_layer(), nn.Linear(16, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        assert idx.dtype == torch.int64 and idx.dim() == 2, (idx.dtype, idx.shape)
        h = self.emb(idx)
        return self.head(h + self.mlp(h))


class NormLM(TinyLM):
    """TinyLM with batch norm over the hidden features: running statistics that evaluation reads."""

    def __init__(self, vocab: int, act_layer: type = nn.ReLU, dim: int = 8) -> None:
        super().__init__(vocab, act_layer, dim)
        self.norm = nn.BatchNorm1d(dim)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx)
        h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        return self.head(h + self.mlp(h))


class Functional(nn.Module):
    """Calls F.relu: no module to replace."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.out = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.fc(x)))


class Raises(nn.Module):
    def __init__(self, act_layer: type = nn.ReLU) -> None:
        super().__init__()
        self.act = act_layer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("first line\nthe model broke here")


def not_a_module(act_layer: type = nn.ReLU) -> int:
    return 3


NOT_CALLABLE = 3


class Ignores(Fixed):
    """Takes act_layer and never uses it (timm issue #202's ReXNet did so)."""

    def __init__(self, act_layer: type = nn.ReLU) -> None:
        super().__init__()


class Known(nn.Module):
    """Answers known in advance (tables, [N, 4]): site 1's input is forced to -(|h| + shift) on its
    first two of four units and to |h| + shift on the others (ReLU: half dead; tanh at shift 100:
    all saturated, none dead); a2 is one module called twice (sites 2 and 3), on inputs forced to
    -shift or below everywhere."""

    def __init__(self, act_layer: type = nn.ReLU, n_in: int = 4, n_out: int = 3, shift: float = 1.0) -> None:
        super().__init__()
        self.fc = nn.Linear(n_in, 4)
        self.a1 = act_layer()
        self.a2 = act_layer()
        self.head = nn.Linear(4, n_out)
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = torch.cat([-(h[:, :2].abs() + self.shift), h[:, 2:].abs() + self.shift], dim=1)
        a = self.a1(h)
        b = self.a2(-(a.abs() + self.shift))
        return self.head(a + self.a2(-(b.abs() + self.shift)))


class ModeDependent(Fixed):
    """Calls one more activation in training mode than in evaluation mode (control flow the check
    forward, in training mode, counts differently from the evaluation passes)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        return self.head(self.body[1](h) if self.training else h)


class Unused(Fixed):
    """Builds an activation through act_layer and never calls it: no activation site."""

    def __init__(self, act_layer: type = nn.ReLU) -> None:
        super().__init__()
        self.spare = act_layer()


class Lazy(nn.Module):
    """Lazy modules (nn.LazyConv2d, nn.LazyBatchNorm2d, nn.LazyLinear: their parameters' shapes
    set by the first forward), a hard-coded nn.ReLU (model.replace) and dropout; [N, 1, 8, 8]."""

    def __init__(self, n_out: int = 10, dropout: float = 0.1) -> None:
        super().__init__()
        self.conv = nn.LazyConv2d(4, 3, padding=1)
        self.bn = nn.LazyBatchNorm2d()
        self.act = nn.ReLU()
        self.drop = nn.Dropout(dropout)
        self.head = nn.LazyLinear(n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.act(self.bn(self.conv(x)))).flatten(1))


class Checks(nn.Module):
    """Tests what it is given as a class, as some models do (`issubclass(act_layer, (nn.Tanh, ...))`
    to decide whether to pass inplace=True)."""

    def __init__(self, act_layer: type = nn.ReLU, n_in: int = 4, n_out: int = 3) -> None:
        super().__init__()
        assert isinstance(act_layer, type) and issubclass(act_layer, nn.Module), act_layer
        self.fc = nn.Linear(n_in, 8)
        self.act = act_layer() if issubclass(act_layer, (nn.Tanh, nn.Sigmoid)) else act_layer(inplace=True)
        self.head = nn.Linear(8, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.fc(x)))


class Output:
    """A stand-in for Hugging Face's ModelOutput: the prediction as `.logits`, beside other fields."""

    def __init__(self, logits: torch.Tensor, hidden: torch.Tensor) -> None:
        self.logits, self.hidden = logits, hidden


class Returns(nn.Module):
    """Fixed's layers (tables, [N, features]), the prediction returned inside another object:
    "logits" an Output (Hugging Face's ModelOutput), "mapping" {"logits": ...}, "tuple" (prediction,
    hidden) (Hugging Face's return_dict=False), "list" the same as a list, "neither" an object with
    neither a logits attribute nor a tensor first element, "none-first" (None, prediction)."""

    def __init__(self, returns: str = "logits", n_in: int = 4, n_out: int = 3) -> None:
        super().__init__()
        self.net, self.returns = Fixed(n_in, n_out), returns

    def forward(self, x: torch.Tensor) -> object:
        hidden = self.net.body(x)
        out = self.net.head(hidden)
        return {"logits": Output(out, hidden), "mapping": {"logits": out}, "tuple": (out, hidden),
                "list": [out, hidden], "neither": Output(None, out),  # type: ignore[arg-type]
                "none-first": (None, out)}[self.returns]


class Sized(nn.Module):
    """An image model whose constructor takes the data's sizes, as timm's create_model does
    (in_chans, num_classes); checks that a repeated gray channel arrives as `in_chans` equal ones."""

    def __init__(self, act_layer: type = nn.ReLU, in_chans: int = 3, num_classes: int = 1000, height: int = 224,
                 width: int = 224) -> None:
        super().__init__()
        self.in_chans, self.hw = in_chans, (height, width)
        self.conv = nn.Conv2d(in_chans, 4, 3, padding=1)
        self.act = act_layer()
        self.head = nn.Linear(4 * height * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[1:] == (self.in_chans, *self.hw), x.shape
        return self.head(self.act(self.conv(x)).flatten(1))


class NoParams(nn.Module):
    """No parameters at all: the first n_out features through a ReLU (tables)."""

    def __init__(self, n_out: int = 3) -> None:
        super().__init__()
        self.act, self.n_out = nn.ReLU(), n_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x[:, : self.n_out])


class Frozen(Fixed):
    """Fixed with its body's parameters frozen (requires_grad=False)."""

    def __init__(self) -> None:
        super().__init__()
        self.body.requires_grad_(False)


def tiny_gpt2(vocab_size: int, n_positions: int, n_embd: int = 16, n_layer: int = 2, n_head: int = 2) -> nn.Module:
    """Hugging Face's GPT-2 language model from a config, no weights downloaded (transformers, the
    [models] extra): its output is a ModelOutput whose `logits` is the prediction."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd,
                                      n_layer=n_layer, n_head=n_head))


def rgb_net(num_classes: int = 10) -> nn.Module:
    """Built for colour images (3 input channels), as ImageNet models are; [N, 3, H, W]."""
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.LazyLinear(num_classes))
