"""model=module's speed: 8 small ResNets on digits (relu and gelu x 4 seeds) trained by actbench,
members one after another (the default) and as one torch.func stack (model.vmap=true), against
the plain PyTorch loop a user would write training them one after another (plain.fit_classifier:
torch.optim.Adam, a shuffled DataLoader, the validation and test loss and accuracy every epoch).
All three in this one process, interleaved in rounds (--repeat) so a shared machine's load falls
on each; the ratio is the median over rounds of model-steps per second against the plain loop's.
Also printed: how far model.vmap's members end from their runs alone (the largest relative
difference of the final validation loss), the tolerance docs/your-own-model.md states.

The model (--model resnet, the default): a conv-BN-act stem and two residual blocks of width 8,
global average pooling, a linear head; the activation through `act_layer` (docs/your-own-model.md's
SmallResNet). Its step is bound by the convolutions' arithmetic on a CPU, where vmap's grouped
convolution and batch norm over members x channels run no faster than one member's kernels, so
stacking can gain only the Python and dispatch overhead. --model mlp: a 64-32-32-10 MLP, whose
step is bound by that overhead: the regime where the torch.func stack pays. Digits: 1,078
training rows (8x8), batch 64, shuffle, Adam lr 1e-3, 17 steps an epoch.

Usage:
    python -m benchmarks.module_throughput [--epochs 10] [--repeat 3] [--threads 1] [--model mlp]
    python -m benchmarks.module_throughput --quick      # a smoke run: 1 epoch, 1 round
"""

from __future__ import annotations

import torch
from torch import nn

from benchmarks import harness
from benchmarks.plain import fit_classifier

ACTS, SEEDS, BATCH, LR = ["relu", "gelu"], 4, 64, 1e-3


class Block(nn.Module):
    def __init__(self, width: int, act_layer: type) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.act = act_layer(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.out = act_layer(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x + self.bn2(self.conv2(self.act(self.bn1(self.conv1(x))))))


class SmallResNet(nn.Module):
    def __init__(self, act_layer: type = nn.ReLU, width: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                  act_layer(inplace=True))
        self.blocks = nn.Sequential(Block(width, act_layer), Block(width, act_layer))
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


class SmallMLP(nn.Module):
    def __init__(self, act_layer: type = nn.ReLU, width: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, width), act_layer(), nn.Linear(width, width),
                                 act_layer(), nn.Linear(width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


MODELS = {"resnet": SmallResNet, "mlp": SmallMLP}
MODEL = "resnet"  # set by --model


def configs(epochs: int, vmap: bool) -> list:
    from activation_bench.config.compose import compose_many

    extra = ["model.vmap=true"] if vmap else []
    return compose_many([["model=module", f"model.target=benchmarks.module_throughput:{MODELS[MODEL].__name__}",
                          "model.act_arg=act_layer",
                          "data=digits", f"batch_size={BATCH}", "shuffle=true", f"epochs={epochs}", f"lr={LR}",
                          f"activation={a}", f"seed={s}", *extra] for a in ACTS for s in range(SEEDS)])


def actbench(epochs: int, vmap: bool) -> tuple[int, list[float]]:
    """Model-steps, and each member's final validation loss, of actbench's engine on the grid."""
    from activation_bench.engine import plan, train

    cfgs = configs(epochs, vmap)
    finals = [0.0] * len(cfgs)
    for stack in plan.plan_stacks(cfgs):
        for i, res in zip(stack, train.train([cfgs[i] for i in stack])):
            finals[i] = res.val_loss[-1]
    return len(cfgs) * epochs * -(-1078 // BATCH), finals


def plain(epochs: int) -> int:
    from activation_bench.config.compose import compose
    from activation_bench.data import splits

    steps = 0
    for a, act in (("relu", nn.ReLU), ("gelu", nn.GELU)):
        for seed in range(SEEDS):
            d = splits.make_dataset(compose(["data=digits", f"seed={seed}", f"activation={a}"]))

            def img(t: torch.Tensor) -> torch.Tensor:
                return t.view(-1, 1, 8, 8)

            torch.manual_seed(seed)
            model = MODELS[MODEL](lambda inplace=False, act=act: act())
            steps += fit_classifier(model, img(d.x), d.y, [(img(d.x_val), d.y_val), (img(d.x_test), d.y_test)],
                                    epochs, BATCH, LR)
    return steps


def main() -> None:
    ap = harness.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch's intra-op threads (0: torch's default)")
    ap.add_argument("--model", choices=sorted(MODELS), default="resnet")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    global MODEL
    MODEL = args.model
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.epochs, args.repeat = 1, 1
    bench = harness.Bench(args)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(ACTS) * SEEDS} members "
          f"({args.model}) x {args.epochs} epochs")
    actbench(1, False), actbench(1, True), plain(1)  # warm-up: imports, data caches
    steps: dict[str, int] = {}
    finals: dict[str, list[float]] = {}
    tolerance = 0.0

    def ours(vmap: bool):  # noqa: ANN202
        def one(_r: int) -> float:
            nonlocal tolerance
            path = "vmap" if vmap else "sequential"
            seconds, (steps[path], finals[path]) = harness.clock(actbench, args.epochs, vmap)
            if vmap:  # untimed: how far vmap's members end from the same members one after another
                tolerance = max(tolerance, *(abs(v - s) / abs(s) for v, s in zip(finals["vmap"], finals["sequential"])))
            return seconds
        return one

    def theirs(_r: int) -> float:
        seconds, steps["plain"] = harness.clock(plain, args.epochs)
        return seconds

    times = harness.interleaved({"plain": theirs, "sequential": ours(False), "vmap": ours(True)}, args.repeat)
    for path in ("sequential", "vmap"):
        bench.figure(f"{path} / the plain loop, model-steps per second",
                     harness.ratios([steps[path] / s for s in times[path]],
                                    [steps["plain"] / s for s in times["plain"]]), goal=">= 1.5")
    print(f"model.vmap's final val_loss against the members one after another: largest relative difference "
          f"{tolerance:.2e}")
    bench.note(vmap_largest_relative_difference=tolerance)
    bench.finish(times)


if __name__ == "__main__":
    main()
