"""Activation search: candidate spaces, behavioural deduplication and successive halving."""
