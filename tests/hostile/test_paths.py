"""Paths stay inside: kustomizations that point out of the repository or the mirror,
symlinks and loops, special files, and strings that only look like paths.

Classes: "reading any file through the offline mirror" (`..` in a remote URL), "any
string in a kustomization is taken for a path" (`/usr` hashed, `/proc` a traceback),
symlink loops (a traceback), and traversal of every field kustomize reads as a path.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.hostile.harness import CONFIGMAP, assert_handled, assert_refused, run_cli, write
from trainops.errors import InputError
from trainops.render.inputs import collect_inputs

SECRET = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: stolen\nstringData:\n  k: hunter2\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A Git repository holding one overlay `o`, a secret outside it, and a mirror."""
    root = tmp_path / "repo"
    write(root / "o" / "cm.yaml", CONFIGMAP.format(name="ok"))
    write(root / "o" / "kustomization.yaml", "resources:\n- cm.yaml\n")
    write(root / "mirror" / "acme-w-v1" / "deploy" / "kustomization.yaml", "resources:\n- c.yaml\n")
    write(root / "mirror" / "acme-w-v1" / "deploy" / "c.yaml", CONFIGMAP.format(name="m"))
    write(root / "mirror" / "acme-w-v1" / "plain" / "x.yaml", CONFIGMAP.format(name="p"))
    write(tmp_path / "outside" / "secret.yaml", SECRET)
    write(tmp_path / "outside" / "kustomization.yaml", "resources:\n- secret.yaml\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _kustomization(repo: Path, text: str) -> None:
    write(repo / "o" / "kustomization.yaml", text)


def _validate(repo: Path, *extra: str):
    return run_cli("validate", "--no-cache", "--remote-mirror", "mirror", *extra, "o", cwd=repo)


TRAVERSALS = [
    ("resource-file-up", "resources:\n- ../../outside/secret.yaml\n"),
    ("resource-dir-up", "resources:\n- ../../outside\n"),
    ("resource-absolute", "resources:\n- {outside}/secret.yaml\n"),
    ("resource-absolute-dir", "resources:\n- {outside}\n"),
    ("component-up", "components:\n- ../../outside\n"),
    ("bases-up", "bases:\n- ../../outside\n"),
    ("generator-file-up", "generators:\n- ../../outside/secret.yaml\n"),
    ("transformer-file-up", "transformers:\n- ../../outside/secret.yaml\n"),
    ("validator-dir-up", "validators:\n- ../../outside\n"),
    ("patch-path-up", "resources:\n- cm.yaml\npatches:\n- path: ../../outside/secret.yaml\n"),
    ("json6902-path-up", "resources:\n- cm.yaml\npatchesJson6902:\n- path: ../../outside/s.yaml\n"),
    ("psm-up", "resources:\n- cm.yaml\npatchesStrategicMerge:\n- ../../outside/secret.yaml\n"),
    ("crds-up", "resources:\n- cm.yaml\ncrds:\n- ../../outside/secret.yaml\n"),
    ("configurations-up", "resources:\n- cm.yaml\nconfigurations:\n- ../../outside/secret.yaml\n"),
    (
        "replacements-up",
        "resources:\n- cm.yaml\nreplacements:\n- path: ../../outside/secret.yaml\n",
    ),
    ("etc-passwd", "resources:\n- /etc/passwd\n"),
    ("proc-self-environ", "resources:\n- /proc/self/environ\n"),
    ("dev-zero", "resources:\n- /dev/zero\n"),
    ("dev-zero-patch", "resources:\n- cm.yaml\npatches:\n- path: /dev/zero\n"),
    ("root-dir", "resources:\n- /\n"),
    ("dot-dot-chain", "resources:\n- ./../o/../../outside/secret.yaml\n"),
]


@pytest.mark.parametrize(("name", "text"), TRAVERSALS, ids=[t[0] for t in TRAVERSALS])
def test_paths_out_of_the_repository_are_refused(repo: Path, name: str, text: str):
    _kustomization(repo, text.format(outside=repo.parent / "outside"))
    outcome = _validate(repo)
    assert_refused(outcome, "kustomization.yaml")
    assert "hunter2" not in outcome.out + outcome.err


REMOTES = [
    ("dotdot-path", "https://github.com/acme/w//../../../outside/secret.yaml?ref=v1"),
    ("dotdot-dir", "https://github.com/acme/w//deploy/../../../../outside?ref=v1"),
    ("dotdot-ref", "https://github.com/acme/w//secret.yaml?ref=v1/../../../outside"),
    ("dotdot-raw", "https://raw.githubusercontent.com/acme/w/v1/../../../outside/secret.yaml"),
    ("dotdot-encoded-owner", "https://github.com/../../outside//secret.yaml?ref=v1"),
]


@pytest.mark.parametrize(("name", "url"), REMOTES, ids=[r[0] for r in REMOTES])
def test_remote_urls_cannot_leave_the_mirror(repo: Path, name: str, url: str):
    """The old lookup resolved `..` outside the mirror and rendered the Secret."""
    _kustomization(repo, f"resources:\n- {url}\n")
    outcome = run_cli("render", "--no-cache", "--remote-mirror", "mirror", "o", cwd=repo)
    assert_handled(outcome)
    assert "hunter2" not in outcome.out and "stolen" not in outcome.out
    assert outcome.code == 2 or "has no offline copy" in outcome.err, outcome


def test_remote_into_the_mirror_still_renders(repo: Path):
    _kustomization(repo, "resources:\n- https://github.com/acme/w//deploy?ref=v1\n")
    outcome = run_cli("render", "--no-cache", "--remote-mirror", "mirror", "o", cwd=repo)
    assert outcome.code == 0 and "name: m" in outcome.out, outcome


def test_remote_pointing_at_a_mirror_directory_without_kustomization(repo: Path):
    """The old walk hashed and staged the whole directory; now it is an input error."""
    _kustomization(repo, "resources:\n- https://github.com/acme/w//plain?ref=v1\n")
    assert_refused(_validate(repo), "without a kustomization.yaml")


STRINGS = ["/usr", "/proc", "/proc/self/fd/0", "/dev/zero", "/", "..", "../../..", "/etc/shadow"]


@pytest.mark.parametrize("value", STRINGS)
def test_strings_that_look_like_paths_are_data(repo: Path, value: str):
    """Only fields kustomize reads as paths are followed: an annotation is never hashed."""
    _kustomization(
        repo,
        f"resources:\n- cm.yaml\ncommonAnnotations:\n  a: {value!r}\nnamePrefix: {'x-'}\n"
        f"labels:\n- pairs:\n    b: ok\n",
    )
    graph = collect_inputs(repo / "o", None)
    assert all(path.is_relative_to(repo) for path in graph.files), sorted(graph.files)[:3]
    outcome = _validate(repo)
    assert_handled(outcome)
    assert outcome.code == 0, outcome


def test_generator_config_is_followed_but_stays_inside(repo: Path):
    write(repo / "o" / "t.yaml", "apiVersion: builtin\nkind: PatchTransformer\n"
          "metadata: {name: t}\npath: /etc/passwd\ntarget: {kind: ConfigMap}\n")  # fmt: skip
    _kustomization(repo, "resources:\n- cm.yaml\ntransformers:\n- t.yaml\n")
    outcome = _validate(repo)
    assert_handled(outcome)
    assert outcome.code == 2 and "root:" not in outcome.err  # kustomize's restrictor refuses


def _symlinks(repo: Path, case: str) -> None:
    o = repo / "o"
    if case == "loop-pair":
        os.symlink("b", o / "a")
        os.symlink("a", o / "b")
        _kustomization(repo, "resources:\n- a\n")
    elif case == "self-loop":
        os.symlink("self", o / "self")
        _kustomization(repo, "resources:\n- self\n")
    elif case == "loop-in-tree":
        os.symlink("l2", o / "l1")
        os.symlink("l1", o / "l2")
    elif case == "dir-loop-in-tree":
        (o / "d").mkdir()
        os.symlink("..", o / "d" / "up")
    elif case == "link-to-secret":
        os.symlink(repo.parent / "outside" / "secret.yaml", o / "s.yaml")
        _kustomization(repo, "resources:\n- s.yaml\n")
    elif case == "link-to-secret-unused":
        os.symlink(repo.parent / "outside" / "secret.yaml", o / "s.yaml")
    elif case == "link-to-outside-dir":
        os.symlink(repo.parent / "outside", o / "out")
        _kustomization(repo, "resources:\n- out\n")
    elif case == "link-to-dev-zero":
        os.symlink("/dev/zero", o / "z.yaml")
    elif case == "link-to-dev-zero-used":
        os.symlink("/dev/zero", o / "z.yaml")
        _kustomization(repo, "resources:\n- z.yaml\n")
    elif case == "dangling":
        os.symlink("nowhere.yaml", o / "gone.yaml")
    elif case == "dangling-used":
        os.symlink("nowhere.yaml", o / "gone.yaml")
        _kustomization(repo, "resources:\n- gone.yaml\n")
    elif case == "kustomization-is-link-out":
        (o / "kustomization.yaml").unlink()
        os.symlink(repo.parent / "outside" / "kustomization.yaml", o / "kustomization.yaml")
    elif case == "kustomization-is-fifo":
        (o / "kustomization.yaml").unlink()
        os.mkfifo(o / "kustomization.yaml")
    elif case == "fifo-in-tree":
        os.mkfifo(o / "pipe.yaml")
    elif case == "fifo-used":
        os.mkfifo(o / "pipe.yaml")
        _kustomization(repo, "resources:\n- pipe.yaml\n")
    elif case == "inside-link":
        os.symlink("cm.yaml", o / "alias.yaml")
        _kustomization(repo, "resources:\n- alias.yaml\n")


SYMLINK_CASES = {
    "loop-pair": {2},
    "self-loop": {2},
    "loop-in-tree": {0},
    "dir-loop-in-tree": {0},
    "link-to-secret": {2},
    "link-to-secret-unused": {0},
    "link-to-outside-dir": {2},
    "link-to-dev-zero": {0},
    "link-to-dev-zero-used": {2},
    "dangling": {0},
    "dangling-used": {2},
    "kustomization-is-link-out": {2},  # its text is never read
    "kustomization-is-fifo": {2},  # opening it for reading waited for a writer forever
    "fifo-in-tree": {0},
    "fifo-used": {2},
    "inside-link": {0},
}


@pytest.mark.parametrize("case", sorted(SYMLINK_CASES))
def test_symlinks_loops_and_special_files(repo: Path, case: str):
    _symlinks(repo, case)
    outcome = _validate(repo)
    assert_handled(outcome)
    assert outcome.code in SYMLINK_CASES[case], outcome
    assert "hunter2" not in outcome.out
    if case == "kustomization-is-link-out":
        assert "outside the repository" in outcome.err and "secret.yaml" not in outcome.err


def test_no_path_followed_leaves_the_repository_or_the_mirror(repo: Path):
    (repo / "o" / "d").mkdir()
    os.symlink(repo.parent / "outside" / "secret.yaml", repo / "o" / "d" / "s.yaml")
    _kustomization(repo, "resources:\n- cm.yaml\n- https://github.com/acme/w//deploy?ref=v1\n")
    graph = collect_inputs(repo / "o", repo / "mirror")
    for path in graph.files:
        assert path.resolve().is_relative_to(repo), path


def test_entry_lines_are_located_only_for_an_error(repo: Path, monkeypatch):
    """Locating an entry parses the kustomization's YAML again: done for every entry, it
    was most of the time an unchanged repository took to validate."""
    import trainops.render.inputs as inputs

    located = []
    real = inputs.locate
    monkeypatch.setattr(inputs, "locate", lambda *a, **k: located.append(a) or real(*a, **k))
    entries = "".join(f"- cm{i}.yaml\n" for i in range(20))
    for i in range(20):
        write(repo / "o" / f"cm{i}.yaml", CONFIGMAP.format(name=f"c{i}"))
    _kustomization(repo, "resources:\n" + entries)
    collect_inputs(repo / "o", None)
    assert located == []
    _kustomization(repo, "resources:\n" + entries + "- missing.yaml\n")
    with pytest.raises(InputError) as error:
        collect_inputs(repo / "o", None)
    assert error.value.line == 22 and "missing.yaml" in error.value.message
    assert len(located) == 1


@pytest.mark.parametrize("command", ["render", "validate"])
@pytest.mark.parametrize("given", ["link-dir", "link-file.yaml", "."])
def test_targets_linked_out_of_the_repository_are_refused(tmp_path: Path, command, given):
    """A target given (or found) through a symbolic link that leads out of the repository
    is refused before anything is rendered, printed or cached."""
    outside = tmp_path / "elsewhere"
    write(outside / "kustomization.yaml", "resources:\n- secret.yaml\n")
    write(outside / "secret.yaml", SECRET)
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    os.symlink(outside, root / "link-dir")
    os.symlink(outside / "secret.yaml", root / "link-file.yaml")
    cache = tmp_path / "cache"
    outcome = run_cli(command, given, cwd=root, cache=cache)
    assert_refused(outcome, "symbolic link", "outside the repository")
    assert "hunter2" not in outcome.out + outcome.err
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


def test_links_inside_the_repository_still_work(tmp_path: Path):
    root = tmp_path / "repo"
    write(root / "o" / "cm.yaml", CONFIGMAP.format(name="ok"))
    write(root / "o" / "kustomization.yaml", "resources:\n- cm.yaml\n")
    (root / ".git").mkdir()
    os.symlink(root / "o", root / "alias")
    outcome = run_cli("render", "--no-cache", "alias", cwd=root)
    assert outcome.code == 0 and "name: ok" in outcome.out


SPECIAL_USES = {
    "patch": "resources:\n- cm.yaml\npatches:\n- path: pipe\n",
    "strategic-merge": "resources:\n- cm.yaml\npatchesStrategicMerge:\n- pipe\n",
    "replacement": "resources:\n- cm.yaml\nreplacements:\n- path: pipe\n",
    "generator-file": "configMapGenerator:\n- name: c\n  files:\n  - k=pipe\n",
    "generator-envs": "configMapGenerator:\n- name: c\n  envs:\n  - pipe\n",
    "secret-file": "secretGenerator:\n- name: s\n  files:\n  - pipe\n",
    "openapi": "openapi:\n  path: pipe\nresources:\n- cm.yaml\n",
    "link-to-fifo-patch": "resources:\n- cm.yaml\npatches:\n- path: alias\n",
}


@pytest.mark.parametrize("use", sorted(SPECIAL_USES))
def test_a_fifo_or_device_a_field_names_is_refused_before_kustomize_reads_it(repo: Path, use):
    """Round 10: a FIFO named by patches, a generator or openapi (or through a link) was
    handed to kustomize, which waited on it with no output (until the build timeout);
    one in `resources` was already refused. An unused one stays harmless (fifo-in-tree)."""
    os.mkfifo(repo / "o" / "pipe")
    os.symlink("pipe", repo / "o" / "alias")
    _kustomization(repo, SPECIAL_USES[use])
    outcome = _validate(repo)
    assert_refused(outcome, "FIFO, socket or device")
    assert "kustomization.yaml" in outcome.err
