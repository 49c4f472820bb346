"""activation-bench: reproducible experiments comparing activation functions."""

__version__ = "0.1.0"
