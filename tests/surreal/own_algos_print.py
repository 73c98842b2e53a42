"""A module that prints at import (a banner, a debug line): what it prints must not reach the
stdout of `surreal create --dry-run -o yaml`, which a pipe reads as YAML."""

import sys

from own_algos_create import Fine  # noqa: F401 - the name --algo takes

print("hello from own_algos_print: not YAML")
sys.stdout.write("{ not: yaml\n")
