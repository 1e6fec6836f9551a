"""The image contract that can be checked without a Docker engine, and the docs."""

from __future__ import annotations

import re
import tomllib

from tests.support import REPO
from trainer.cli import build_parser

DOCKERFILE = (REPO / "trainer" / "Dockerfile").read_text()


def test_base_image_is_a_pinned_release():
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    name, _, tag = base.rpartition(":")
    assert name and tag and tag != "latest" and re.search(r"\d", tag)


def test_runs_as_non_root_with_trainer_launch_as_entry_point():
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["trainer-launch"\]$', DOCKERFILE, re.MULTILINE)
    project = tomllib.loads((REPO / "trainer" / "pyproject.toml").read_text())["project"]
    scripts = project["scripts"]
    assert scripts["trainer-launch"] == "trainer.launch:main"
    # The base image's CUDA torch must survive the install.
    assert "--no-deps /opt/trainer" in DOCKERFILE


def test_the_image_installs_every_dependency_but_the_base_images_torch_and_numpy():
    project = tomllib.loads((REPO / "trainer" / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ ]", dependency)[0] for dependency in project["dependencies"]}
    installs = [line for line in DOCKERFILE.splitlines() if "pip install" in line]
    installed = set(re.findall(r'"([a-z][a-z0-9-]*)[<>=]', "\n".join(installs)))
    assert names - {"torch", "numpy"} == installed


def test_every_trainer_flag_is_documented():
    guide = (REPO / "docs" / "trainer.md").read_text()
    flags = {
        option
        for action in build_parser({})._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    undocumented = sorted(flag for flag in flags if flag not in guide)
    assert undocumented == []
