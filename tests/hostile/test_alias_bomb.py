"""A YAML alias bomb in a kustomization's file is refused before kustomize reads it
(issue 45): kustomize expands aliases without go-yaml's bound, so a 700-byte file took
30 s and 6.7 GB there (attack round 13, F1). Files with modest aliasing still render."""

from __future__ import annotations

from pathlib import Path

from tests.support import write
from trainops.kubeyaml.reader import alias_bomb_line

KUSTOMIZATION = (
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- job.yaml\n"
)


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x,x]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ",".join([f"*a{level - 1}"] * 10) + "]")
    job = "apiVersion: batch/v1\nkind: ConfigMap\nmetadata: {name: laughs}\n"
    return "\n".join(lines) + "\n" + job


def test_a_bomb_is_refused_naming_its_file_and_line(trainops, tmp_path: Path):
    # six levels: a million nodes, which kustomize still expands (so the test can fail)
    write(tmp_path / "bomb/kustomization.yaml", KUSTOMIZATION)
    write(tmp_path / "bomb/job.yaml", _bomb(6))
    run = trainops("validate", "--no-cache", str(tmp_path / "bomb"))
    assert run.code == 2, run.out + run.err
    assert run.err.strip().splitlines() == [run.err.strip()]
    assert "job.yaml:4: alias expansion limit exceeded" in run.err
    assert "Traceback" not in run.err and run.out == ""


def test_modest_aliasing_still_renders(trainops, tmp_path: Path):
    config = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared, namespace: training}\n"
        "data:\n  a: &value hello\n  b: *value\n  c: *value\n"
    )
    write(tmp_path / "fine/kustomization.yaml", KUSTOMIZATION)
    write(tmp_path / "fine/job.yaml", config)
    run = trainops("validate", "--no-cache", str(tmp_path / "fine"))
    assert "alias expansion" not in run.err and run.code in (0, 1), run.err


def test_the_bound_is_go_yamls_ratio_counted_on_events():
    assert alias_bomb_line(_bomb(9)) == 3  # 0-based: the a4 line passes the bound
    assert alias_bomb_line(_bomb(2)) is None  # 110 nodes: below the 1,000 floor
    assert alias_bomb_line("a: &x [1, 2]\nb: *x\n---\nc: *x\n") is None
    assert alias_bomb_line("not: [valid") is None  # a parse error is reported elsewhere
