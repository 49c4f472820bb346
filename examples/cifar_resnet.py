"""He et al.'s CIFAR ResNets (Deep Residual Learning for Image Recognition, 2016, section 4.2):
a 3x3 convolution of 16 channels, three stages of n basic blocks with 16, 32 and 64 channels (the
first block of stages 2 and 3 halves the resolution), global average pooling and a linear head;
6n + 2 layers. Shortcuts are the paper's option A (identity, with a subsampled and zero-padded
input where the shape changes: no parameters), so ResNet-20 has 0.27M parameters and ResNet-56
0.86M. The activation comes in as timm's `act_layer` (a class or factory, called with
inplace=True), the convention actbench's model.act_arg passes its activation through:

  actbench run model=module model.target=examples.cifar_resnet:resnet20 model.act_arg=act_layer \\
      data=cifar10 activation=mish

Plain PyTorch: nothing here imports actbench."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

ActLayer = Callable[..., nn.Module]


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, act_layer: ActLayer) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.act1 = act_layer(inplace=True)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.act2 = act_layer(inplace=True)
        self.pad = c_out - c_in  # option A: the shortcut's extra channels are zeros
        self.stride = stride

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1 and not self.pad:
            return x
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.act2(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, n: int, num_classes: int = 10, in_channels: int = 3, act_layer: ActLayer = nn.ReLU) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.act = act_layer(inplace=True)
        blocks: list[nn.Module] = []
        c_in = 16
        for c_out, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(BasicBlock(c_in, c_out, stride if i == 0 else 1, act_layer))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():  # the paper's initialisation (He et al. 2015) for the convolutions
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.act(self.bn(self.conv(x))))
        return self.fc(x.mean(dim=(2, 3)))


def resnet20(num_classes: int = 10, in_channels: int = 3, act_layer: ActLayer = nn.ReLU) -> CifarResNet:
    return CifarResNet(3, num_classes, in_channels, act_layer)


def resnet56(num_classes: int = 10, in_channels: int = 3, act_layer: ActLayer = nn.ReLU) -> CifarResNet:
    return CifarResNet(9, num_classes, in_channels, act_layer)
