"""Node pools and cluster providers."""
