"""The JAX peer: the grid written as a JAX expert would, run as a whole process.

Parameters stacked per activation ([members, ...] arrays), `jax.vmap` over members,
`jax.value_and_grad` of the sum of the members' MSEs (each member gets its own gradient),
`optax.adam`, and all epochs inside one `jax.jit`-compiled `jax.lax.scan`, so XLA fuses the
elementwise work of forward, backward and Adam. Each member's loss is kept every epoch and
fetched to the host at the end, as a script that goes on to save them would; nothing is written.

Usage (needs the [bench] extra: jax, optax):
    python -m benchmarks.peers.jax_peer [--seeds 30] [--epochs 1000]
    python -m benchmarks.peers.jax_peer --check   # epochs 1-5 of each activation x data vs actbench
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import provenance
from benchmarks.peers import grid

ACT = {
    "gelu": lambda h: jax.nn.gelu(h, approximate=False),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "elu": jax.nn.elu,
    "tanh": jnp.tanh,
    "mish": jax.nn.mish,
    "leaky_relu": lambda h: jax.nn.leaky_relu(h, 0.01),
    "softplus": jax.nn.softplus,
}


def member_loss(params: dict, x: jax.Array, y: jax.Array, act) -> jax.Array:
    pred = act(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return jnp.mean((pred - y[:, 0]) ** 2)


def train(acts: list[str], stacks: list[dict[str, np.ndarray]], epochs: int) -> np.ndarray:
    """stacks[i]: the members of activation acts[i]. Returns losses [epochs, members in total]."""
    params = [{k: jnp.asarray(s[k]) for k in ("w1", "b1", "w2", "b2")} for s in stacks]
    data = [(jnp.asarray(s["x"]), jnp.asarray(s["y"])) for s in stacks]
    fns = [jax.vmap(lambda p, x, y, f=ACT[a]: member_loss(p, x, y, f)) for a in acts]

    def losses(all_params: list[dict]) -> tuple[jax.Array, jax.Array]:
        per = jnp.concatenate([f(p, x, y) for f, p, (x, y) in zip(fns, all_params, data)])
        return per.sum(), per

    opt = optax.adam(grid.LR)

    def step(carry, _):
        p, state = carry
        (_, per), grads = jax.value_and_grad(losses, has_aux=True)(p)
        updates, state = opt.update(grads, state, p)
        return (optax.apply_updates(p, updates), state), per

    @jax.jit
    def run(p):
        _, per = jax.lax.scan(step, (p, opt.init(p)), None, length=epochs)
        return per

    return np.asarray(run(params))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--check", action="store_true", help="compare epochs 1-5 with actbench (imports torch)")
    args = ap.parse_args()
    if args.check:  # the timed runs print no header: a peer process pays nothing of ours
        print(provenance.header())
        grid.check("jax", lambda act, member, epochs: train([act], [member], epochs)[:, 0])
        return
    start = time.perf_counter()
    losses = train(grid.ACTS, grid.stacks(args.seeds), args.epochs)
    assert losses.shape == (args.epochs, len(grid.ACTS) * len(grid.DATA) * args.seeds)
    print(f"jax: {losses.shape[1]} members x {args.epochs} epochs in {time.perf_counter() - start:.2f} s "
          f"(after imports); final mean loss {losses[-1].mean():.4g}")


if __name__ == "__main__":
    main()
