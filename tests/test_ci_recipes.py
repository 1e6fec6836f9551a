"""docs/ci.md's recipes and the integration files, checked by the real tools.

The GitHub workflow by actionlint, the GitLab job against GitLab's CI schema (as
check-jsonschema ships it), the pre-commit files by pre-commit, which also runs the
hook from a hook repository on a temporary Git repository. Dockerfile.cli cannot be
built here (its build downloads kubectl and kustomize): hadolint lints it and the
rest is checked statically.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, WHEEL_SOURCES, copy_sources
from tests.workspace import commit, git
from trainops.output import FORMATS

CI_DOC = REPO / "docs" / "ci.md"
BIN = Path(sys.executable).parent
_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```yaml\n(.*?)```", re.DOTALL)


def recipes() -> dict[str, str]:
    return dict(_BLOCK.findall(CI_DOC.read_text()))


def tool(
    name: str,
    *args: str,
    cwd: Path | None = None,
    env: dict | None = None,
    input_text: str | None = None,
):
    return subprocess.run(
        [str(BIN / name), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        input=input_text,
        capture_output=True,
        text=True,
        check=False,
    )


def write_recipe(tmp_path: Path, name: str, text: str | None = None) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(recipes()[name] if text is None else text)
    return path


def test_ci_doc_has_the_three_recipes():
    assert set(recipes()) == {
        ".github/workflows/trainops.yml",
        ".gitlab-ci.yml",
        ".pre-commit-config.yaml",
    }


def test_github_workflow_passes_actionlint(tmp_path: Path):
    workflow = write_recipe(tmp_path, ".github/workflows/trainops.yml")
    run = tool("actionlint", "-no-color", str(workflow))
    assert run.returncode == 0, run.stdout + run.stderr
    # The same linter rejects a broken copy: the check can fail.
    broken = workflow.read_text().replace("runs-on: ubuntu-latest", "runs_on: ubuntu-latest", 1)
    bad = write_recipe(tmp_path, ".github/workflows/broken.yml", broken)
    assert tool("actionlint", "-no-color", str(bad)).returncode == 1


def test_github_workflow_uploads_the_sarif_it_writes_and_comments_the_diff():
    workflow = yaml.safe_load(recipes()[".github/workflows/trainops.yml"])
    steps = workflow["jobs"]["validate"]["steps"]
    commands = " ".join(step.get("run", "") for step in steps)
    for fmt in re.findall(r"--format (\w+)", commands):
        assert fmt in FORMATS
    written = re.search(r"--format sarif --output (\S+)", commands).group(1)
    [upload] = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload")]
    assert upload["with"]["sarif_file"] == written and upload["if"] == "always()"
    assert workflow["jobs"]["validate"]["permissions"]["security-events"] == "write"
    diff = " ".join(s.get("run", "") for s in workflow["jobs"]["diff"]["steps"])
    assert "trainops diff" in diff and "--format markdown --output diff.md" in diff
    assert "--body-file diff.md" in diff


def test_gitlab_job_passes_gitlab_ci_schema(tmp_path: Path):
    job = write_recipe(tmp_path, ".gitlab-ci.yml")
    run = tool("check-jsonschema", "--builtin-schema", "vendor.gitlab-ci", str(job))
    assert run.returncode == 0, run.stdout + run.stderr
    broken = job.read_text().replace("    reports:\n", "    report:\n", 1)
    bad = write_recipe(tmp_path, "broken-gitlab-ci.yml", broken)
    assert tool("check-jsonschema", "--builtin-schema", "vendor.gitlab-ci", str(bad)).returncode
    report = yaml.safe_load(job.read_text())["trainops-validate"]
    script = " ".join(report["script"])
    assert "--format junit --output trainops-junit.xml" in script
    assert report["artifacts"] == {"when": "always", "reports": {"junit": "trainops-junit.xml"}}


def test_pre_commit_files_are_valid_for_pre_commit(tmp_path: Path):
    manifest = tool("pre-commit", "validate-manifest", str(REPO / ".pre-commit-hooks.yaml"))
    assert manifest.returncode == 0, manifest.stdout
    config = write_recipe(tmp_path, ".pre-commit-config.yaml")
    assert tool("pre-commit", "validate-config", str(config)).returncode == 0
    [hook] = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    used = yaml.safe_load(config.read_text())["repos"][0]["hooks"][0]["id"]
    assert hook["id"] == used and hook["entry"].startswith("trainops validate")


@pytest.mark.slow
def test_pre_commit_runs_the_hook_on_a_temporary_git_repository(workspace: Path, tmp_path):
    hooks = copy_sources(tmp_path / "hook-repo", (*WHEEL_SOURCES, ".pre-commit-hooks.yaml"))
    git(hooks, "init", "-q", "-b", "main")
    git(hooks, "config", "user.email", "ci@example.com")
    git(hooks, "config", "user.name", "ci")
    commit(hooks, "trainops hooks")
    storage = workspace / "overlays" / "lab-tcp" / "platform" / "storage.yaml"
    good = storage.read_text()
    storage.write_text(good.replace("storageClassName: ", "storageClassName: 7 #", 1))
    git(workspace, "add", "-A")
    env = {
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "TRAINOPS_CACHE_DIR": str(tmp_path / "cache"),
    }

    def hook(*files: str):
        args = ["try-repo", str(hooks), "trainops-validate", "--files", *files]
        return tool("pre-commit", *args, cwd=workspace, env=env)

    failed = hook("overlays/lab-tcp/platform/storage.yaml")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "overlays/lab-tcp/platform/storage.yaml:9: error:" in failed.stdout
    assert "generated from: overlays/lab-tcp/cluster.yaml:" in failed.stdout
    assert "1 target," in failed.stdout  # only the overlay that reads the file
    storage.write_text(good)
    git(workspace, "add", "-A")
    passed = hook("overlays/lab-tcp/platform/storage.yaml", "README.md")
    assert passed.returncode == 0, passed.stdout + passed.stderr


DOCKERFILE = REPO / "Dockerfile.cli"


def test_dockerfile_passes_hadolint():
    run = tool("hadolint", "--no-color", str(DOCKERFILE))
    assert run.returncode == 0, run.stdout + run.stderr
    # The same linter rejects an unpinned base image: the check can fail.
    unpinned = tool("hadolint", "--no-color", "-", input_text="FROM python\nRUN cd /tmp\n")
    assert unpinned.returncode == 1 and "DL3006" in unpinned.stdout


def test_dockerfile_installs_the_wheel_with_kustomize_as_a_non_root_user():
    text = DOCKERFILE.read_text()
    final = text.rsplit("\nFROM ", 1)[1]
    users = re.findall(r"^USER (\S+)$", final, re.MULTILINE)
    assert users and users[-1] not in ("root", "0"), users
    assert 'ENTRYPOINT ["trainops"]' in final
    # Every file the wheel is built from is in the image's build stage.
    in_stage = text.split("AS wheel", 1)[1].split("\nFROM ", 1)[0]
    for name in WHEEL_SOURCES:
        assert re.search(rf"^COPY .*\b{re.escape(name)}\b", in_stage, re.MULTILINE), name
    # kubectl and kustomize land on PATH, verified against their published sums.
    assert "/usr/local/bin/" in final and "kustomize" in final and "kubectl" in final
    assert text.count("sha256sum -c -") == 2
