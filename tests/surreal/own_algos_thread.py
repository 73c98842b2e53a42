"""A module that starts a thread at import that never ends and is not a daemon (a metrics reporter,
a watchdog): `create` must exit all the same, refusal or not. Never imported by the test process
(it would never exit): tests/surreal/test_own_algorithm.py runs it through the `surreal` command."""

import threading

from own_algos_create import Fine, NoUpdate  # noqa: F401 - the names --algo takes

threading.Thread(target=threading.Event().wait, name="never-ends").start()
