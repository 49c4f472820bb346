"""activation-bench's benchmarks: `python -m benchmarks.<name>` from a checkout (docs/performance.md)."""
