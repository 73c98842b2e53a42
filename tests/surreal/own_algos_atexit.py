"""A module whose exit handler ends the process with 0 (a script's cleanup): a refusal at create
must still exit 2. Never imported by the test process (its handler would end pytest with 0)."""

import atexit
import os

from own_algos_create import NoUpdate  # noqa: F401 - the name --algo takes

atexit.register(os._exit, 0)
