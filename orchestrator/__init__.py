"""Turns an experiment spec into components and runs them (locally or on Kubernetes)."""
