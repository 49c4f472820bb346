"""How normal each hidden layer's pre-activations are (log.preact_stats=K, preact.csv).

The GELU paper chooses the normal CDF "since neuron inputs tend to follow a normal distribution,
especially with Batch Normalization". This log measures that premise while training: at
initialisation (epoch 0), every K epochs and after the last epoch, each member's network is run on
a fixed probe batch, its first PROBE_ROWS training rows (in data order, the same rows every
time), and for every hidden layer the activation's input (after model.norm) is summarised.

Each unit's values over the probe rows are one sample of that neuron's input. Per unit: its mean,
standard deviation (biased, the fitted normal's), skewness and excess kurtosis (moment ratios,
as scipy.stats.skew and kurtosis compute them by default) and the Kolmogorov-Smirnov distance
between the values and the normal of that mean and standard deviation. A layer's row is the mean
of each statistic over its units (units whose values are all equal have none and are left out;
NaN where every unit is). Computed in float64.

The probe pass changes nothing: dropout is off and stochastic activations give their expectation
(evaluation mode), batch norm standardises with the probe batch's own statistics, as in training,
without updating its running statistics; it draws no random numbers, so training is unchanged.
"""

from __future__ import annotations

import math

import torch

from activation_bench.engine.models.base import MemberLayers

PROBE_ROWS = 256
STATS = ("mean", "std", "skewness", "excess_kurtosis", "ks_normal")


def unit_stats(v: torch.Tensor) -> torch.Tensor:
    """v [M, N, units] -> [len(STATS), M, units]: each unit's statistics over the N rows (float64;
    NaN for a unit whose values are all equal, except its mean and std)."""
    v = v.to(torch.float64)
    n = v.shape[1]
    mean = v.mean(1, keepdim=True)
    std = (v - mean).square().mean(1, keepdim=True).sqrt()
    z = (v - mean) / std.where(std > 0, torch.nan)
    skew = z.pow(3).mean(1)
    kurt = z.pow(4).mean(1) - 3.0
    cdf = torch.special.ndtr(z.sort(dim=1).values)
    i = torch.arange(1, n + 1, dtype=torch.float64, device=v.device)[None, :, None]
    ks = torch.maximum(i / n - cdf, cdf - (i - 1) / n).amax(1)
    ks = ks.where(std[:, 0] > 0, torch.nan)
    return torch.stack([mean[:, 0], std[:, 0], skew, kurt, ks])


class PreactLog:
    """Per logged epoch, hidden layer, statistic and member: the layer's mean over units."""

    def __init__(self, every: int, epochs: int, depth: int, members: int) -> None:
        self.epochs = [e for e in range(epochs + 1) if e % every == 0 or e == epochs]
        self.row = {e: i for i, e in enumerate(self.epochs)}
        self.values = torch.full((len(self.epochs), depth, len(STATS), members), math.nan, dtype=torch.float64)

    def due(self, epoch: int) -> bool:
        return epoch in self.row

    @torch.no_grad()
    def add(self, epoch: int, model: MemberLayers, x: torch.Tensor) -> None:
        """Log the stack's pre-activations on x[:, :PROBE_ROWS] after `epoch` epochs."""
        preacts: list[torch.Tensor] = []
        was_training = model.training
        model.eval()
        try:
            model(x[:, :PROBE_ROWS], preacts=preacts, batch_stats=True)
        finally:
            model.train(was_training)
        for layer, h in enumerate(preacts):
            self.values[self.row[epoch], layer] = unit_stats(h).nanmean(-1).cpu()

    def per_member(self, stops: list[int]) -> list[list[tuple[int, int, str, float]]]:
        """Each member's rows (epoch, layer, stat, value), up to its last epoch trained."""
        vals = self.values.tolist()
        return [[(e, k + 1, s, vals[i][k][j][m]) for i, e in enumerate(self.epochs) if e <= stop
                 for k in range(len(vals[i])) for j, s in enumerate(STATS)]
                for m, stop in enumerate(stops)]
