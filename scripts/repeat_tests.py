"""Run a pytest path K times in a row and say how often each test failed: the flake finder.

    python scripts/repeat_tests.py tests/containers -n 10 [-- PYTEST ARGS...]
    make repeat TESTS=tests/containers K=10

Each run writes pytest's JUnit XML; at the end one line per test gives its failures (errors
included) out of the runs it took part in, and one line per run its wall time and exit code. The
exit status is 1 when any test failed or any run ended badly (pytest exit code other than 0 or 5).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def outcomes(junit: Path) -> dict[str, str]:
    """Test id -> passed, failed or skipped, from one JUnit XML report (failed: errors too)."""
    if not junit.is_file():
        return {}
    result: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            result[test_id] = "failed"  # a teardown error shows up as a second entry: keep failed
        elif "skipped" in kinds:
            result.setdefault(test_id, "skipped")
        else:
            result.setdefault(test_id, "passed")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="what to give pytest: a folder, file or test id")
    parser.add_argument("-n", "--times", type=int, default=10, help="runs in a row (default 10)")
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []  # more pytest arguments
    args = parser.parse_args(argv[: len(argv) - len(extra) - bool(extra or "--" in argv)])
    runs: list[tuple[float, int]] = []  # (wall seconds, exit code)
    failed: Counter[str] = Counter()
    took_part: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="repeat-tests-") as tmp:
        for i in range(1, args.times + 1):
            junit = Path(tmp) / f"run{i}.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
            start = time.monotonic()
            code = subprocess.run([*cmd, *extra, args.path]).returncode
            runs.append((time.monotonic() - start, code))
            found = outcomes(junit)
            for test_id, outcome in found.items():
                if outcome != "skipped":
                    took_part[test_id] += 1
                    failed[test_id] += outcome == "failed"
            bad = sum(outcome == "failed" for outcome in found.values())
            print(f"== run {i}/{args.times}: {runs[-1][0]:.0f} s, exit {code}, {bad} failed", flush=True)
    print(f"\n== failures per test over {args.times} runs of {args.path}")
    for test_id in sorted(took_part, key=lambda t: (-failed[t], t)):
        print(f"{failed[test_id]:>3}/{took_part[test_id]:<3} {test_id}")
    walls = [wall for wall, _ in runs]
    each = " ".join(f"{w:.0f}" for w in walls)
    print(f"== wall time per run (s): {each}; mean {sum(walls) / len(walls):.0f}")
    broken = [i for i, (_, code) in enumerate(runs, 1) if code not in (0, 5)]
    return 1 if any(failed.values()) or broken else 0


if __name__ == "__main__":
    sys.exit(main())
