"""The Dockerfile agrees with the pods that run it."""

from __future__ import annotations

import re
import tomllib

from kube_support import REPO

from surreal.orchestrator.kube.pods import RUN_AS


def test_image_user_is_the_pods_user_and_torch_is_the_cpu_build() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"--uid {RUN_AS}" in dockerfile and f"USER {RUN_AS}:{RUN_AS}" in dockerfile
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^ARG TORCH_INDEX=https://download\.pytorch\.org/whl/cpu$", dockerfile, re.M)
    assert "ENTRYPOINT" not in dockerfile.replace("no ENTRYPOINT", "")


def test_every_package_folder_reaches_the_image() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders = {path.split("/")[0] for path in pyproject["tool"]["setuptools"]["package-dir"].values()}
    dockerfile = (REPO / "Dockerfile").read_text()
    ignore = (REPO / ".dockerignore").read_text().split()
    for folder in folders:
        assert f"COPY {folder}/ {folder}/" in dockerfile, folder
        assert f"!{folder}/" in ignore, folder
