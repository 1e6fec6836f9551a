"""What the ApplicationSets' git generators make of a tree on disk: directories, names
from the path parameters (Go and fasttemplate), files generators' selectors, excludes,
and names left unknown where the template needs more than the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainops.appsets import generated_applications, name_conflicts, name_taken
from trainops.model import Document


def appset(name: str, template: str, git: dict, go: bool = True, **spec) -> Document:
    obj = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": name},
        "spec": {
            "goTemplate": go,
            "generators": [{"git": {"repoURL": "https://example.com/r.git", **git}}],
            "template": {
                "metadata": {"name": template},
                "spec": {"source": {"path": "{{.path.path}}" if go else "{{path}}"}},
            },
            **spec,
        },
    }
    return Document(obj, "argocd")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for directory in ("overlays/a/runs/b-x", "overlays/a-b/runs/x", "overlays/a/runs/y"):
        (tmp_path / directory).mkdir(parents=True)
    (tmp_path / "overlays/a/cluster.yaml").write_text("scheduler: kueue\n")
    (tmp_path / "overlays/a-b/cluster.yaml").write_text("scheduler: volcano\n")
    return tmp_path


RUNS = {"directories": [{"path": "overlays/*/runs/*"}]}


@pytest.mark.parametrize(
    ("template", "go"),
    [
        ("{{index .path.segments 1}}-{{.path.basename}}", True),
        ("{{path[1]}}-{{path.basename}}", False),
    ],
)
def test_path_parameters_name_each_directory(tree, template, go):
    apps = generated_applications(tree, [appset("runs", template, RUNS, go=go)])
    assert {(a.path, a.name) for a in apps} == {
        ("overlays/a/runs/b-x", "a-b-x"),
        ("overlays/a-b/runs/x", "a-b-x"),
        ("overlays/a/runs/y", "a-y"),
    }
    conflicts = name_conflicts(apps)
    assert set(conflicts) == {"overlays/a/runs/b-x", "overlays/a-b/runs/x"}
    assert conflicts["overlays/a/runs/b-x"].others == ("overlays/a-b/runs/x (ApplicationSet runs)",)


def test_a_name_from_anything_but_the_path_is_unknown(tree):
    apps = generated_applications(tree, [appset("runs", "{{.path.basename}}-{{.env}}", RUNS)])
    assert [a.name for a in apps] == [None, None, None]
    assert name_conflicts(apps) == {}


def test_excluded_directories_make_no_application(tree):
    git = {
        "directories": [
            {"path": "overlays/*/runs/*"},
            {"path": "overlays/a/runs/*", "exclude": True},
        ]
    }
    apps = generated_applications(tree, [appset("runs", "{{.path.basename}}", git)])
    assert [a.path for a in apps] == ["overlays/a-b/runs/x"]


def test_a_files_generator_keeps_only_what_its_selector_matches(tree):
    git = {"files": [{"path": "overlays/*/cluster.yaml"}]}
    kueue = appset("kueue", "{{.path.basename}}-kueue", git, selector={})
    kueue.obj["spec"]["generators"][0]["selector"] = {"matchLabels": {"scheduler": "kueue"}}
    apps = generated_applications(tree, [kueue])
    assert [(a.path, a.name) for a in apps] == [("overlays/a", "a-kueue")]


@pytest.mark.parametrize("pattern", ["../*", "/etc/*"])
def test_a_pattern_reaching_outside_the_tree_matches_nothing(tree, pattern):
    git = {"directories": [{"path": pattern}]}
    assert generated_applications(tree, [appset("runs", "{{.path.basename}}", git)]) == []


def test_a_planned_directory_is_named_before_it_exists(tree):
    appsets = [appset("runs", "{{index .path.segments 1}}-{{.path.basename}}", RUNS)]
    taken = name_taken(tree, appsets, "overlays/a/runs/b-y")
    assert taken is None
    (tree / "overlays/a-b/runs/y").mkdir()
    taken = name_taken(tree, appsets, "overlays/a/runs/b-y")
    assert taken is not None and taken.name == "a-b-y", taken
