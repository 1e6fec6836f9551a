"""What a cluster overlay promises about NCCL: from its profile and its rendered job
template (the NCCL environment every training pod of that cluster gets)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from trainops.errors import InputError
from trainops.model import Target
from trainops.policy.pods import env_of, pod_templates
from trainops.profile.model import ClusterProfile, load_profile
from trainops.render.discover import display_path, kustomization_file
from trainops.render.engine import Renderer

PROFILE = "cluster.yaml"


@dataclass
class Expectation:
    """What the cluster promises; all optional."""

    transport: str | None = None  # ib | socket
    gdr: bool = False
    hca: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* the job template sets
    overlay: str | None = None
    profile: dict[str, object] = field(default_factory=dict)


def from_overlay(directory: Path, renderer: Renderer) -> Expectation:
    if not (directory / PROFILE).is_file():
        raise InputError(f"not a cluster overlay: no {PROFILE}", str(directory))
    profile = load_profile(directory / PROFILE)
    env: dict[str, str] = {}
    template = directory / "training" / "pytorchjob"
    if kustomization_file(template) is not None:
        [result] = renderer.render([Target("kustomization", str(template))])
        for doc in result.documents:
            for pod in pod_templates(doc):
                for container in pod.containers:
                    env.update(
                        {
                            k: v
                            for k, v in env_of(container).items()
                            if k.startswith("NCCL_") and v is not None
                        }
                    )
    return Expectation(
        transport="socket" if profile.fabric == "tcp" else "ib",
        gdr=profile.gpudirect in ("dmabuf", "peermem"),
        hca=list(profile.hca),
        env=env,
        overlay=display_path(directory),
        profile={f.name: getattr(profile, f.name) for f in fields(ClusterProfile)},
    )
