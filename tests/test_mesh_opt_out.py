"""Training pods opt out of Istio's sidecar (issue 44 item 6): an injected proxy redirects
the pod's traffic, so the rendezvous, NCCL's and Gloo's own ports, and the MPI launcher's
init container go through a proxy that is not meant for them. The label
`sidecar.istio.io/inject: "false"` on the pod, not the annotation, is what Istio's webhook
reads (policies/mesh.py cites its code). Every pod template of every training kind the
repository's overlays render carries it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

TRAINING_KINDS = {"PyTorchJob", "MPIJob", "JobSet", "TrainingRuntime", "ClusterTrainingRuntime"}


def pod_templates(value: Any) -> Iterator[dict]:
    """Every {metadata, spec: {containers}} below `value`."""
    if isinstance(value, dict):
        spec = value.get("spec")
        if isinstance(spec, dict) and "containers" in spec:
            yield value
        for item in value.values():
            yield from pod_templates(item)
    elif isinstance(value, list):
        for item in value:
            yield from pod_templates(item)


@pytest.mark.parametrize("overlay", ["lab-tcp", "prod-roce", "prod-b200", "prod-ib"])
def test_every_training_pod_template_opts_out_of_the_istio_sidecar(trainops, overlay):
    run = trainops("render", "--format", "json", f"overlays/{overlay}")
    assert run.code == 0, run.err
    templates = [
        (record["object"]["kind"], template)
        for record in json.loads(run.out)
        if record["object"]["kind"] in TRAINING_KINDS
        for template in pod_templates(record["object"])
    ]
    assert len(templates) >= 6, [kind for kind, _ in templates]
    for kind, template in templates:
        labels = (template.get("metadata") or {}).get("labels") or {}
        assert labels.get("sidecar.istio.io/inject") == "false", (kind, template["metadata"])
