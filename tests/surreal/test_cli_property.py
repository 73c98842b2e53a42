"""A property of the whole CLI, driven by generated names and values (hypothesis): whatever a user
types, a non-zero exit comes with exactly one line on stderr and no traceback, and nothing outside
the named experiment changes (only `delete` of an experiment changes anything at all).

Runs derandomized by default, so CI sees the same examples every time (a test that fails by chance
is a defect); `HYPOTHESIS_PROFILE=explore` draws new ones, and more of them, for a local hunt.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from cli_world import HOSTILE, make_experiment, snapshot, surreal, without
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surreal.orchestrator.kube import output as kube_output
from surreal.spec import build_spec

settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, max_examples=120,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
settings.register_profile(
    "explore", deadline=None, max_examples=1000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

EXISTING = ["alpha", "beta", "linked"]
names = st.one_of(
    st.sampled_from([*HOSTILE, *EXISTING, "gamma"]),
    st.from_regex(r"[a-z][-a-z0-9]{0,45}", fullmatch=True),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=45),
)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["inf", "-inf", "nan", "1e400", "", " ", "0", "-1", "1_000", "0x10", "3.5"]),
)
# No ':' in an environment: MODULE:ATTR imports a module, and a generated one could be any.
words = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=":"), max_size=30)
SETTINGS = ["learning_rate", "epochs", "gamma", "envs_per_agent", "seed", "agents", "namespace", "image",
            "env_kwargs.size", "steps", "gpu", "agents_per_pod", "eval_episodes", "hidden_sizes",
            "handout_ratio", "population", "fragment_length", "final_eval_timeout", "log_std_init",
            "env_kwargs.render_mode", "learners"]  # fmt: skip
# Values that expand: YAML aliases nine deep ("billion laughs", 9**9 items from 1 KiB), under a
# setting and at the top; a list past the values a config may hold; a mapping that holds itself.
LAUGHS = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
]
# Config files a hostile user (or surreal itself: a dry run's output) hands to --config, made in
# each example's tree: text, or None for a FIFO (refused unread, never waited on).
CONFIGS: dict[str, str | None] = {
    "bomb.yaml": "env_kwargs:\n" + "".join(f"  {line}\n" for line in LAUGHS),
    "bomb-top.yaml": "\n".join(LAUGHS), "self.yaml": "env_kwargs: &s\n  me: *s\n",
    "big.yaml": "env_kwargs:\n  big: [" + ",".join(["1"] * 150_000) + "]\n", "fifo.yaml": None,
    "empty-section.yaml": "algo: ppo\nppo:\n", "deep.yaml": "env_kwargs: " + "[" * 5000 + "]" * 5000,
    "digits.yaml": "seed: " + "9" * 5000,
    "dry-run.yaml": build_spec("alpha", flags={"algo": "ppo", "steps": 1000}).to_yaml(),
    "kube-dry-run.yaml": kube_output.dry_run(
        build_spec("alpha", flags={"algo": "ppo", "steps": 1000, "backend": "kube"}), "yaml", token="t"),
}  # fmt: skip
WHERE = ["us-west-2", "us east; rm -rf /", "", "eastus", "a" * 200, "US-WEST-2", "europe-west1-b"]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    name = draw(names)
    kind = draw(st.sampled_from(["status", "delete", "logs", "scale", "plot", "list", "create", "config",
                                 "provision"]))  # fmt: skip
    if kind == "status":
        return ["status", name, *draw(st.sampled_from([[], ["-o", "json"]]))]
    if kind == "delete":
        return ["delete", name]
    if kind == "logs":
        return ["logs", name, draw(st.sampled_from(["learner", "actor-0", "../state.json", "..", "x/y"])),
                "-n", draw(numbers)]  # fmt: skip
    if kind == "scale":
        return ["scale", name, "--agents", draw(numbers)]
    if kind == "plot":
        return ["plot", name, "-o", "curve.png"]
    if kind == "list":
        return ["list", *draw(st.sampled_from([[], ["-o", "json"]]))]
    if kind == "config":
        backend = draw(st.sampled_from([[], ["--backend", "kube"]]))
        return ["create", name, "--config", draw(st.sampled_from(sorted(CONFIGS))), "--dry-run", *backend]
    if kind == "provision":
        where = draw(st.sampled_from(["--region", "--zone", "--project", "--resource-group"]))
        return ["provision", "plan", "--provider", draw(st.sampled_from(["gke", "eks", "aks", "kind"])),
                where, draw(st.one_of(st.sampled_from(WHERE), words))]  # fmt: skip
    flag = draw(st.sampled_from(["--seed", "--agents", "--steps", "--learners", "--gpu", "--namespace",
                                 "--image", "--env", "--set"]))  # fmt: skip
    value = draw(words) if flag in ("--namespace", "--image", "--env") else draw(numbers)
    if flag == "--set":
        value = f"{draw(st.sampled_from(SETTINGS))}={draw(st.one_of(numbers, words))}"
    backend = draw(st.sampled_from([[], ["--backend", "kube"]]))
    algo = draw(st.sampled_from(["ppo", "es"]))
    return ["create", name, "--algo", algo, "--dry-run", *backend, flag, value]


@pytest.mark.slow
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_any_command_line_is_one_line_or_success_and_touches_only_its_experiment(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = Path(tempfile.mkdtemp(prefix="surreal-prop-"))
    try:
        home = top / "home"
        make_experiment(home, "alpha")
        make_experiment(home, "beta")
        (home / "notes.txt").write_text("the user's own file\n")
        (top / "outside").mkdir()
        (top / "outside" / "spec.yaml").write_text("name: linked\n")
        for file, text in CONFIGS.items():
            if text is None:
                os.mkfifo(top / file)
            else:
                (top / file).write_text(text)

        (home / "experiments" / "linked").symlink_to(top / "outside", target_is_directory=True)
        monkeypatch.setenv("SURREAL_HOME", str(home))
        monkeypatch.chdir(top)
        before = snapshot(top)

        code, _, err = surreal(capsys, *argv)

        assert code in (0, 1, 2), (argv, code, err)
        assert "Traceback" not in err, (argv, err)
        if code != 0:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("surreal: error: "), (argv, err)
        after = snapshot(top)
        if argv[0] == "delete" and code == 0:
            assert after == without(before, os.path.join("home", "experiments", argv[1])), argv
        else:
            touched = {"curve.png"} if argv[0] == "plot" and code == 0 else set()
            assert {k: v for k, v in after.items() if k not in touched} == before, argv
    finally:
        shutil.rmtree(top, ignore_errors=True)
