"""Pieces every algorithm shares: env batches, normalization, evaluation, checkpoints."""
