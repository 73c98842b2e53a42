from __future__ import annotations

import sys
from pathlib import Path

# roles.py sits beside the tests (tests/ is not a package); es/ imports it too.
sys.path.insert(0, str(Path(__file__).parent))
