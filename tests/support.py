"""Paths, sample manifests and small helpers shared by the test modules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO / "base" / "operators" / "mirror"
CORPUS = REPO / "tests" / "corpus"


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
