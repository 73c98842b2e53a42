"""The `surreal` command's entry point: the one place where whatever goes wrong becomes one line.

The commands live in `commands.py` and are imported inside `main`, so that a Ctrl-C or a broken
install while the heavy modules load is reported like any other failure. Exit codes: 0 success,
1 failure, 2 bad input (click's usage errors and every refused value), 130 interrupted. An
exception nobody expected is one line too; `SURREAL_DEBUG=1` prints its traceback as well.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import NoReturn

DEBUG_ENV = "SURREAL_DEBUG"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; never lets a traceback reach the user unless SURREAL_DEBUG=1 asks for one."""
    if argv is None:  # the `surreal` command itself (tests pass argv, and keep their process)
        _end(sys.argv[1:])
    try:
        import click

        from surreal.cli.commands import cli

        try:
            cli.main(args=argv, prog_name="surreal", standalone_mode=False)
        except click.exceptions.Abort:
            _fail("interrupted", 130)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:  # `surreal list | head -1`: the reader has what it wanted
        _quiet_stdout()
        sys.exit(141)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the one place that turns any error into one line
        if os.environ.get(DEBUG_ENV) == "1":
            traceback.print_exc()
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _fail(
            f"unexpected {type(exc).__name__}{': ' + detail[:200] if detail else ''} "
            f"(a bug in surreal; run again with {DEBUG_ENV}=1 for the traceback)",
            1,
        )


def _end(argv: list[str]) -> NoReturn:
    """Run the command, then end the process at once with the code it decided. A user's module
    imported on the way (`--algo`, `--env`) may have started a thread that never ends, which the
    interpreter's exit would wait for, or registered an exit handler that calls os._exit, which
    would replace the code: neither runs past this."""
    try:
        main(argv)
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if not isinstance(code, int):  # sys.exit(None) or sys.exit("message"), as the interpreter takes them
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, a closed stream: nothing more to say
            pass
    os._exit(code)


def _fail(message: str, code: int) -> None:
    try:
        print(f"surreal: error: {message}", file=sys.stderr, flush=True)
    except OSError:
        pass
    sys.exit(code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
