"""Host access is graded by the posture declared for the object (policy/posture.py).

(a) What the API server refuses (the namespace's Pod Security enforce level) is an error
whatever the posture; (b) a run or a team's workload asking for host access is an error;
(c) elsewhere it is a warning, info on a node agent, and an error where the policy config
says `security: enforce` for the path or namespace.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tests.support import REPO, write
from trainops.model import Document, Target
from trainops.policy import Context
from trainops.policy.engine import evaluate
from trainops.policy.posture import Enforcement
from trainops.policy.settings import PolicySettings, load_pack, load_settings

load_pack(REPO / "policies")


def _daemonset(namespace: str = "kube-system", host_path: str = "/var/lib/kubelet") -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "hostNetwork": True,
                    "containers": [
                        {
                            "name": "agent",
                            "image": "example.com/agent:1.0",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                        }
                    ],
                    "volumes": [{"name": "host", "hostPath": {"path": host_path}}],
                },
            },
        },
    }


def _tenancy(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trainops-runs", "namespace": namespace},
        "data": {"team": "vision"},
    }


def _severities(docs: list[dict], target: str = "platform.yaml", settings=None) -> dict:
    documents = [Document(obj=copy.deepcopy(d), source=target) for d in docs]
    ctx = Context(Target("file", target), documents)
    found = evaluate(ctx, settings or PolicySettings())
    return {f.rule: f.severity for f in found if f.rule in ("host-network", "host-path")}


def test_a_node_agent_is_info_and_other_host_access_a_warning():
    assert _severities([_daemonset()]) == {"host-network": "info", "host-path": "info"}
    # not a node agent: a DaemonSet mounting the node's /etc
    assert _severities([_daemonset(host_path="/etc")]) == {
        "host-network": "warning",
        "host-path": "warning",
    }


def test_a_team_namespace_makes_host_access_an_error():
    assert _severities([_daemonset("vision"), _tenancy("vision")]) == {
        "host-network": "error",
        "host-path": "error",
    }
    # the same object in a namespace no team owns
    assert _severities([_daemonset("vision"), _tenancy("nlp")]) == {
        "host-network": "info",
        "host-path": "info",
    }


def test_a_run_asking_for_host_access_is_an_error():
    run = "overlays/gpu-east/runs/probe/kustomization.yaml"
    assert _severities([_daemonset()], target=run) == {
        "host-network": "error",
        "host-path": "error",
    }


def test_declared_enforcement_makes_it_an_error(tmp_path: Path):
    enforced = PolicySettings(enforcement=Enforcement(namespaces=("kube-*",)))
    assert _severities([_daemonset()], settings=enforced) == {
        "host-network": "error",
        "host-path": "error",
    }
    elsewhere = PolicySettings(enforcement=Enforcement(namespaces=("prod-*",)))
    assert _severities([_daemonset()], settings=elsewhere)["host-network"] == "info"
    config = write(
        tmp_path / "config.yaml",
        "security:\n  enforce:\n    paths: [base/operators]\n    namespaces: [kube-system]\n",
    )
    loaded = load_settings(config)
    assert loaded.enforcement == Enforcement(("base/operators",), ("kube-system",))
    assert Enforcement(("base/operators",)).covers("base/operators/multus", None)
    assert not Enforcement(("base/operators",)).covers("base/operators-old", None)


def test_the_message_says_which_posture_applies():
    documents = [Document(obj=_daemonset(host_path="/etc"), source="x.yaml")]
    found = evaluate(Context(Target("file", "x.yaml"), documents), PolicySettings())
    [finding] = [f for f in found if f.rule == "host-network"]
    assert "no security posture is declared here" in finding.message


def test_pod_security_enforce_is_an_error_whatever_the_posture():
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "kube-system",
            "labels": {"pod-security.kubernetes.io/enforce": "baseline"},
        },
    }
    documents = [Document(obj=d, source="x.yaml") for d in (namespace, _daemonset())]
    found = evaluate(Context(Target("file", "x.yaml"), documents), PolicySettings())
    assert [f.severity for f in found if f.rule == "pod-security-level"] == ["error"]
