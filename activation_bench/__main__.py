"""`python -m activation_bench`: the same as the `actbench` script (the entry point, in the cli layer)."""

from activation_bench.cli.main import main

main()
