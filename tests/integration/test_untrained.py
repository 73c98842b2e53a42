"""A run is Succeeded only when it trained, and a run that makes no progress ends and says why:
each case through the installed `surreal`, as a user meets it (exit code, the one line, status's
phase and problem). Every run is bounded: by its steps, by a hook that ends it at once, or by a
progress deadline of a few seconds; none can be counted Succeeded whatever the machine's speed."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import RUN_TIMEOUT, Cli

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
QUICK = ("--env", "CartPole-v1", "--agents", "1", "--steps", "2000", "--set", "steps_per_update=256",
         "--set", "fragment_length=32", "--set", "eval_episodes=1")  # fmt: skip
SAC_QUICK = ("--env", "Pendulum-v1", "--agents", "1", "--steps", "2000", "--set", "hidden_sizes=[16,16]",
             "--set", "learning_starts=100", "--set", "replay_ratio=4",
             "--set", "eval_episodes=1")  # fmt: skip
DEADLINE = ("--set", "progress_deadline_seconds=4")

CASES = {
    # (algo, flags): what `create` and `status` must say
    "every update skipped": ("untrained_algos:NanStats", QUICK,
                             "the run did not train: no update was applied"),
    "update calls sys.exit(0)": ("untrained_algos:ExitsZero", SAC_QUICK,
                                 "algorithm untrained_algos:ExitsZero: its update raised SystemExit"),
    "update calls os._exit(0)": ("untrained_algos:HardExit", QUICK,
                                 "the learner exited 0 before its run was done"),
    "update returns a 3-element tensor": ("untrained_algos:VectorStat", QUICK,
                                          "its update returned statistic 'loss' as a Tensor of shape (3,)"),
    "update never returns": ("untrained_algos:Sleeper", (*QUICK, *DEADLINE), "the run makes no progress"),
    "every fragment refused": ("sac", (*SAC_QUICK, "--set", "max_abs_reward=0.001", *DEADLINE),
                               "no env step was counted"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_that_did_not_train_fails_and_says_why(cli: Cli, case: str) -> None:
    algo, flags, said = CASES[case]
    cli.env["PYTHONPATH"] = str(HERE)
    proc = cli.run("create", "u", "--algo", algo, *flags, timeout=RUN_TIMEOUT, ok=False)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    st = cli.status("u")
    assert st["phase"] == "Failed" and said in (st.get("problem") or ""), (
        said,
        st.get("problem"),
        st["phase"],
    )
    assert said in proc.stderr, proc.stderr[-3000:]
    assert not cli.leftovers()
