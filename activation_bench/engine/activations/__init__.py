"""Activations: the registry, closed forms, expressions and grouped evaluation."""
