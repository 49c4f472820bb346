"""Sending finished runs to experiment trackers (MLflow)."""
