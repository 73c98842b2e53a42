"""surreal: a Kubernetes-native, layered stack for distributed deep reinforcement learning."""

__version__ = "0.1.0"
