"""The NVIDIA DRA driver's sharing settings graded by what the kubelet plugin does with
them: a strategy that needs an off-by-default feature gate is a warning, settings the
plugin refuses whatever its gates are an error (policies/dra.py, nvidia-dra-gpu-config)."""

from __future__ import annotations

from tests.policies.areas.kubernetes_core import _claims, _gpu_config
from tests.policies.test_rules import findings

MPS = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}


def _graded(sharing: dict) -> set[tuple[str, str]]:
    docs = _claims(_gpu_config(sharing=sharing))()
    return {
        (f.severity, f.path.rsplit(".", 1)[-1])
        for f in findings(docs)
        if f.rule == "nvidia-dra-gpu-config"
    }


def test_mps_alone_is_only_the_feature_gate_warning():
    assert _graded(MPS) == {("warning", "strategy")}


def test_a_time_slicing_config_beside_mps_is_an_error():
    graded = _graded({**MPS, "timeSlicingConfig": {"interval": "Default"}})
    assert graded == {("warning", "strategy"), ("error", "timeSlicingConfig")}
