"""Tensor ops with a torch reference for each; every op is batch-invariant per row."""
