"""Checks run by hand from a checkout, not benchmarks and not part of the test suite: the bitwise
check in fresh processes (`python -m tools.bitwise_processes`), the preemption soak
(`python -m tools.soak_preemption`) and a one-node SLURM for `--launcher submitit_slurm`
(`sudo bash tools/slurm_one_node.sh`). Each prints the provenance header of benchmarks/.
"""
