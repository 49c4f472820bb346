"""`python -m activation_bench.cli`: the same as the `actbench` script."""

from activation_bench.cli.main import main

main()
