"""A synthetic platform repository: many clusters, each with many runs.

Written with the same generators `trainops new-cluster` and `trainops new-run` use,
so the benchmark validates exactly what users' repositories hold: a mix of fabrics
(tcp, roce, ib), schedulers and run templates. Remote bases point at the offline
mirror (as tests/bench/validate_bench.py does) so that the peer pipeline renders the
same input without network.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tests.bench.validate_bench import point_remotes_at_mirror
from tests.support import REPO
from trainops.profile.model import load_profile
from trainops.profile.overlay import templates
from trainops.profile.runs import TEMPLATES, RunOptions
from trainops.profile.writer import write_cluster, write_run

FABRICS = (
    {"fabric": "tcp", "nic": "eth0"},
    # SR-IOV VFs: a pod sees only its own, so NCCL is given the rail count, not HCA names.
    {"fabric": "roce", "gidIndex": 3, "rdmaResource": "nvidia.com/roce_vf", "rdmaPerPod": 2},
    {"fabric": "ib", "rdmaResource": "nvidia.com/ib_vf", "rdmaPerPod": 2},
)
SCHEDULERS = ("default", "kueue", "volcano")
TRAINERS = ("v1", "both", "v2")  # which run templates a cluster offers


def cluster_values(index: int) -> dict:
    return {
        **FABRICS[index % len(FABRICS)],
        "gpusPerNode": 8,
        "nodes": 4 + index % 5,
        "storageClass": "cephfs",
        "scheduler": SCHEDULERS[index % len(SCHEDULERS)],
        "gpuProduct": "NVIDIA-H100-80GB-HBM3",
        "image": f"registry.example.com/trainops-trainer:0.{index}.0",
        "trainer": TRAINERS[index % len(TRAINERS)],
    }


def build(clusters: int, runs: int) -> Path:
    """A temporary repository with `clusters` overlays of `runs` runs each; caller removes it."""
    root = Path(tempfile.mkdtemp(prefix="trainops-platform-repo-"))
    for name in ("base", "schemas", "policies", "argocd"):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "overlays").mkdir()
    point_remotes_at_mirror(root)
    for index in range(clusters):
        name = f"gpu-{index:03d}"
        write_cluster(root, name, cluster_values(index), force=False)
        templates = run_templates(root, name)
        for number in range(runs):
            template = templates[number % len(templates)]
            options = RunOptions(template=template, nodes=2, args=run_args(template, number))
            write_run(root, name, f"run-{number:03d}", options, force=False)
    return root


def run_templates(root: Path, cluster: str) -> list[str]:
    """The run templates cluster `cluster` of the repository at `root` offers."""
    profile = load_profile(root / "overlays" / cluster / "cluster.yaml")
    return sorted(t for t in templates(profile) if t in TEMPLATES)


def run_args(template: str, number: int) -> list[str]:
    """Arguments for run `number`: the trainer's, or torchtitan's for its template (which
    refuses a run without --module and --config)."""
    if template == "torchtitan":
        return ["--module", "llama3", "--config", "llama3_8b", f"--training.steps={1000 + number}"]
    return ["--model", "gpt", "--max-steps", str(1000 + number)]


def kustomizations(root: Path) -> list[Path]:
    """Every overlay and run directory (what the peer renders one at a time)."""
    return sorted(
        p.parent
        for p in (root / "overlays").rglob("kustomization.yaml")
        if "kind: Component" not in p.read_text()
    )
