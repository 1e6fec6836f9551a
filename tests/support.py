"""Paths, sample manifests and small helpers shared by the test modules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO / "base" / "operators" / "mirror"
CORPUS = REPO / "tests" / "corpus"
# ../shared (upstream CRDs, install manifests, real-world corpus) beside the checkout or
# one level up; None where it is not on this machine.
SHARED = next(
    (p for p in (REPO.parent / "shared", REPO.parents[1] / "shared") if (p / "upstream").is_dir()),
    None,
)
# What a wheel (and the CLI image) is built from: the files setup.py and pyproject.toml read.
WHEEL_SOURCES = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "tools",
    "policies",
    "schemas",
)


def copy_sources(target: Path, names: tuple[str, ...] = WHEEL_SOURCES) -> Path:
    """A copy of the repository's files `names`, without caches and build metadata."""
    import shutil

    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, target / name, ignore=ignore)
        else:
            shutil.copy(REPO / name, target / name)
    return target


@dataclass
class Run:
    code: int
    out: str
    err: str


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: typo
  namespace: ml
spec:
  pytorchReplicaSpecs:
    Worker:
      {replicas_key}: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: registry.example.com/trainer:1.0
"""
