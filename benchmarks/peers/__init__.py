"""The peers: what a user could run instead of actbench, each a module of its own run as a whole
process by the benchmarks (`python -m benchmarks.peers.jax_peer`, `...torchfunc_peer`; nanoGPT's own
`train.py` through `benchmarks.peers.nanogpt`). Imports nothing: the JAX peer must not pay for torch.
"""
