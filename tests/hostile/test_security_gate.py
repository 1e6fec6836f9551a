"""The gate cannot be opened by the change it gates.

Class: "a run's own `trainops.dev/exempt-<rule>` annotation silences
privileged-container and host-network (exit 0, the exemption not even reported, no
expiry)". Security rules take exemptions only from the policy config (reason, expiry)
or from annotations under the paths it lists, never in a run; every exemption in
effect is reported.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.hostile.harness import assert_handled, run_cli, write
from tests.policies.fixtures import FIXTURES
from tests.support import REPO
from trainops.model import Document, Target
from trainops.policy import SECURITY, Context, registered
from trainops.policy.engine import evaluate
from trainops.policy.settings import load_pack, load_settings

load_pack(REPO / "policies")
SECURITY_RULES = sorted(r.id for r in registered().values() if r.info.category == SECURITY)
# The tenancy gate (round 10: a run's own annotation silenced each of these).
TENANCY_GATE = {
    "admission-policy", "run-team-namespace", "run-team-queue", "run-priority-allowed",
    "image-registry-approved", "network-attachment-approved", "network-policy-own-job",
    "run-kind-synced", "run-job-own-name", "pod-security-level",
}  # fmt: skip
# Rules whose failing fixture fires only with a cluster profile or as a render rule:
# tests/test_tenancy.py shows their self-exemptions refused end to end.
NEEDS_PROFILE = {"admission-policy", "pod-security-level", "run-job-own-name", "run-kind-synced"}
POD_SECURITY_RULES = [
    r for r in SECURITY_RULES if registered()[r].scope != "render" and r not in NEEDS_PROFILE
]


def test_the_security_rules_are_the_ones_a_run_could_abuse():
    expected = {
        "host-network", "host-pid", "host-ipc", "privileged-container", "host-path",
        "capabilities", "host-ports", "training-service-account", "privileged-image-digest",
        "image-pinned", "secret-literal", *TENANCY_GATE,
    }  # fmt: skip
    assert expected <= set(SECURITY_RULES)


def _run_findings(rule: str, target: str, settings_text: str = "", tmp_path: Path | None = None):
    failing, _ = FIXTURES[rule]
    docs = failing()
    for doc in docs:
        doc.setdefault("metadata", {}).setdefault("annotations", {})[
            f"trainops.dev/exempt-{rule}"
        ] = "trust me"
    settings = load_settings(
        write(tmp_path / "config.yaml", settings_text) if settings_text else None
    )
    documents = [Document(obj=copy.deepcopy(d), source=target) for d in docs]
    return evaluate(Context(Target("kustomization", target), documents), settings)


@pytest.mark.parametrize("rule", POD_SECURITY_RULES)
def test_a_runs_own_annotation_does_not_exempt_it(rule: str, tmp_path: Path):
    found = _run_findings(rule, "overlays/prod-roce/runs/evil", tmp_path=tmp_path)
    # still reported (at the severity its contract gives it): the annotation exempted nothing
    assert [f for f in found if f.rule == rule and f.severity in ("error", "warning")], rule
    assert any(f.rule == "policy-exemption" and "security rule" in f.message for f in found)


def test_an_annotation_on_a_listed_path_exempts_and_is_reported(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()
    (tmp_path / "base" / "agents").mkdir(parents=True)
    config = "annotation-paths: [base/agents]\n"
    found = _run_findings("host-network", "base/agents", config, tmp_path)
    assert not [f for f in found if f.rule == "host-network"]
    [shown] = [f for f in found if f.rule == "exemption-in-effect" and "host-network" in f.message]
    assert "annotation trainops.dev/exempt-host-network" in shown.message
    assert "trust me" in shown.message


def test_a_listed_path_never_covers_a_run(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()
    (tmp_path / "overlays" / "c" / "runs" / "r").mkdir(parents=True)
    found = _run_findings(
        "host-network", "overlays/c/runs/r", "annotation-paths: [overlays]\n", tmp_path
    )
    assert [f for f in found if f.rule == "host-network"]


def test_the_policy_config_exempts_with_its_reason_and_expiry(tmp_path: Path):
    config = (
        "exemptions:\n- rule: privileged-container\n  resources: [PyTorchJob/training/llama]\n"
        "  reason: firmware flashing job\n  expires: 2999-01-01\n"
        "  paths: [overlays/c/runs/r]\n"  # a config exemption holds in a run only where it says
    )
    found = _run_findings("privileged-container", "overlays/c/runs/r", config, tmp_path)
    assert not [f for f in found if f.rule == "privileged-container"]
    [shown] = [f for f in found if f.rule == "exemption-in-effect"]
    assert "config.yaml:2, until 2999-01-01" in shown.message and "firmware" in shown.message


def test_ordinary_rules_still_take_annotations(tmp_path: Path):
    found = _run_findings("dev-shm-missing", "overlays/c/runs/r", tmp_path=tmp_path)
    assert not [f for f in found if f.rule == "dev-shm-missing"]
    assert [f for f in found if f.rule == "exemption-in-effect"]


E2E_CHANGES = {
    "privileged": ({}, {"securityContext": {"privileged": True}}),
    "hostpath-root": ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, {}),
    "sys-admin": ({}, {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}),
    "host-port": ({}, {"ports": [{"containerPort": 22, "hostPort": 22}]}),
    "service-account": ({"serviceAccountName": "training-operator"}, {}),
    "host-network": ({"hostNetwork": True}, {}),
}


@pytest.mark.parametrize("change", sorted(E2E_CHANGES))
def test_end_to_end_a_run_that_asks_for_the_node_fails(workspace: Path, change: str):
    """A run directory as an ML engineer would push it, exemption annotations included."""
    pod, container = E2E_CHANGES[change]
    spec = {**pod, **({"containers": [{"name": "pytorch", **container}]} if container else {})}
    patch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "train",
            "namespace": "training",
            "annotations": {f"trainops.dev/exempt-{r}": "ok" for r in SECURITY_RULES},
        },
        "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": spec}}}},
    }
    run = workspace / "overlays/lab-tcp/runs/evil"
    write(run / "patch.yaml", yaml.safe_dump(patch))
    write(
        run / "kustomization.yaml",
        "resources:\n- ../../training/pytorchjob\nnamePrefix: evil-\n"
        "patches:\n- path: patch.yaml\n",
    )
    outcome = run_cli(
        "validate", "--no-cache", "--format", "json", "overlays/lab-tcp/runs/evil", cwd=workspace
    )
    assert_handled(outcome)
    assert outcome.code == 1, outcome.err or outcome.out[-2000:]
    report = json.loads(outcome.out)
    rules = {f["rule"] for f in report["findings"] if f["severity"] == "error"}
    assert rules & set(SECURITY_RULES), rules
