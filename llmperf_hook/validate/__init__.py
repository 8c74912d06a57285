"""Accuracy against measured runs (issue 5)."""
