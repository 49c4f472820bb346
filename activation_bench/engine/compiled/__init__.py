"""The compiled engine: choosing it, its store, the shared step and each family's step."""
