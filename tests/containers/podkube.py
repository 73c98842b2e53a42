"""The container harness's old command line (`up`/`down`), kept while the container tests move to
`surreal create --backend containers`; the code lives in surreal.orchestrator.containers_*."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from surreal.orchestrator.containers_plan import *  # noqa: F403
from surreal.orchestrator.containers_plan import ContainersError as HarnessError
from surreal.orchestrator.containers_plan import load_objects, translate
from surreal.orchestrator.containers_run import *  # noqa: F403
from surreal.orchestrator.containers_run import Run, engine_for, new_workdir, remove_run

# --- command line -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podkube", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="run the objects' pods until the learner is done (then remove them)")
    up.add_argument("objects", help="a YAML file of objects, or - for standard input")
    up.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the end of the run")
    up.add_argument("--keep", action="store_true", help="leave the containers running once done")
    sub.add_parser("down", help="remove every container and network that a run left behind")
    args = parser.parse_args(argv)
    workdir, keep = new_workdir(), False
    try:
        engine = engine_for(workdir)
        if args.cmd == "down":
            remove_run(engine)
            return 0
        text = sys.stdin.read() if args.objects == "-" else Path(args.objects).read_text()
        plan = translate(load_objects(text), workdir=workdir)
        with Run(plan, engine) as run:
            print(f"run {plan.run_id}: {len(plan.pods)} containers on network {plan.network}", flush=True)
            last = ""

            def done() -> bool:
                nonlocal last
                st = run.status(probe=False)
                line = (
                    f"{st['phase']}: {st.get('env_steps') or 0} steps, {st.get('updates') or 0} updates, "
                    f"eval {st.get('eval_return')}"
                )
                if line != last:
                    print(line, flush=True)
                    last = line
                return st["phase"] == "Succeeded"

            run.wait_for("the learner to report the run done", done, args.timeout)
            print(json.dumps(run.status(), indent=2, default=str))
            if args.keep:
                print(f"left running, volumes in {workdir}; remove with: python {sys.argv[0]} down")
                run._closed = keep = True
        return 0
    except HarnessError as exc:
        print(f"podkube: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("podkube: interrupted; everything this run made is removed", file=sys.stderr)
        return 130
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
