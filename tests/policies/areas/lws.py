"""Fixtures of policies/lws.py: the LeaderWorkerSet webhook's and CRD's refusals, the
deprecated restartPolicy Default, and JobSet dependsOn ordering (success policy met by
the dependency, Complete on a replicated job the dependent connects to). Each failing
render differs from its passing one in the one thing the rule checks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import NAMESPACE, Docs, jobset, pod


def lws(name: str = "llama-serving", annotations: dict | None = None, **spec: Any):
    """A LeaderWorkerSet the LWS webhook admits, with `spec` (or its template) changed."""
    template: dict[str, Any] = {
        "size": 4,
        "workerTemplate": pod("worker"),
    }
    for key in ("size", "restartPolicy", "subGroupPolicy"):
        if key in spec:
            template[key] = spec.pop(key)
    base: dict[str, Any] = {"replicas": 2, "leaderWorkerTemplate": template, **spec}
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if annotations:
        metadata["annotations"] = annotations

    def build() -> Docs:
        return [
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": copy.deepcopy(metadata),
                "spec": copy.deepcopy({k: v for k, v in base.items() if v is not None}),
            }
        ]

    return build


def rolling(**config: Any) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdateConfiguration": config}


def _staged(
    status: str = "Complete",
    success: dict[str, Any] | None = None,
    host: str | None = None,
) -> Callable[[], Docs]:
    """A JobSet `llm`: `prepare` then `workers` (dependsOn prepare with `status`)."""

    def build() -> Docs:
        js = jobset()
        workers = js["spec"]["replicatedJobs"][0]
        prepare = copy.deepcopy(workers)
        prepare["name"] = "prepare"
        prepare["template"]["spec"].update(parallelism=1, completions=1)
        step = prepare["template"]["spec"]["template"]["spec"]["containers"][0]
        step.update(command=["python", "-m", "prepare"], args=[])
        workers["dependsOn"] = [{"name": "prepare", "status": status}]
        js["spec"]["replicatedJobs"] = [prepare, workers]
        if success is not None:
            js["spec"]["successPolicy"] = success
        if host is not None:
            container = workers["template"]["spec"]["template"]["spec"]["containers"][0]
            container.setdefault("env", []).append({"name": "PS_ADDR", "value": host})
        return [js]

    return build


SUBGROUP_EXCLUSIVE = {"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}

FIXTURES = {
    "lws-webhook": (
        lws(size=8, subGroupPolicy={"subGroupSize": 3}),
        lws(size=8, subGroupPolicy={"subGroupSize": 4}),
    ),
    "lws-enum": (
        lws(startupPolicy="leaderReady"),
        lws(startupPolicy="LeaderReady"),
    ),
    "lws-restart-policy-default": (
        lws(restartPolicy="Default"),
        lws(restartPolicy="RecreateGroupOnPodRestart"),
    ),
    "jobset-depends-on-success-policy": (
        _staged(success={"operator": "Any"}),
        _staged(success={"operator": "All"}),
    ),
    "jobset-depends-on-complete-service": (
        _staged(status="Complete", host="llm-prepare-0-0.llm:2222"),
        _staged(status="Ready", host="llm-prepare-0-0.llm:2222"),
    ),
}

MORE = {
    "lws-webhook": [
        # size-1 divisible: the leader joins the first subgroup
        (
            lws(size=9, subGroupPolicy={"subGroupSize": 5}),
            lws(size=9, subGroupPolicy={"subGroupSize": 4}),
        ),
        # LeaderExcluded needs size-1 divisible
        (
            lws(size=8, subGroupPolicy={"subGroupSize": 4, "subGroupPolicyType": "LeaderExcluded"}),
            lws(size=9, subGroupPolicy={"subGroupSize": 4, "subGroupPolicyType": "LeaderExcluded"}),
        ),
        (
            lws(size=4, subGroupPolicy={"subGroupSize": 8}),
            lws(size=8, subGroupPolicy={"subGroupSize": 8}),
        ),
        (lws(size=0), lws(size=1)),
        (lws(name="llama_serving"), lws(name="llama-serving")),
        (lws(name="70b-serving"), lws(name="{{ .Release.Name }}-serving")),
        (lws(replicas=2_000_000), lws(replicas=1_000_000)),
        # both come to 0 (maxSurge defaults to 0)
        (
            lws(rolloutStrategy=rolling(maxUnavailable=0)),
            lws(rolloutStrategy=rolling(maxUnavailable=0, maxSurge=1)),
        ),
        # 10% of 3 rounds down to 0; maxSurge 10% of 3 rounds up to 1
        (
            lws(replicas=3, rolloutStrategy=rolling(maxUnavailable="10%")),
            lws(replicas=3, rolloutStrategy=rolling(maxUnavailable="10%", maxSurge="10%")),
        ),
        (
            lws(replicas=0, rolloutStrategy=rolling(maxUnavailable=-1)),
            lws(replicas=0, rolloutStrategy=rolling(maxUnavailable=0)),
        ),
        (
            lws(rolloutStrategy=rolling(maxSurge="150%")),
            lws(rolloutStrategy=rolling(maxSurge="100%")),
        ),
        (
            lws(rolloutStrategy=rolling(maxUnavailable="1")),
            lws(rolloutStrategy=rolling(maxUnavailable="{{ .Values.maxUnavailable }}")),
        ),
        (lws(rolloutStrategy=rolling(partition=-1)), lws(rolloutStrategy=rolling(partition=1))),
        (
            lws(annotations=SUBGROUP_EXCLUSIVE),
            lws(annotations=SUBGROUP_EXCLUSIVE, subGroupPolicy={"subGroupSize": 2}),
        ),
    ],
    "lws-enum": [
        (lws(restartPolicy="RecreateGroup"), lws(restartPolicy="RecreateGroupAfterStart")),
        (
            lws(networkConfig={"subdomainPolicy": "Unique"}),
            lws(networkConfig={"subdomainPolicy": "UniquePerReplica"}),
        ),
        (
            lws(size=5, subGroupPolicy={"subGroupSize": 2, "subGroupPolicyType": "leaderExcluded"}),
            lws(size=5, subGroupPolicy={"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"}),
        ),
        (lws(rolloutStrategy={"type": "Recreate"}), lws(rolloutStrategy={"type": "RollingUpdate"})),
    ],
    "jobset-depends-on-success-policy": [
        (
            _staged(success={"operator": "All", "targetReplicatedJobs": ["prepare"]}),
            _staged(success={"operator": "All", "targetReplicatedJobs": ["workers"]}),
        ),
        (
            _staged(success={"operator": "Any", "targetReplicatedJobs": ["prepare"]}),
            _staged(
                status="Ready", success={"operator": "Any", "targetReplicatedJobs": ["prepare"]}
            ),
        ),
    ],
    "jobset-depends-on-complete-service": [
        (
            _staged(host="tcp://llm-prepare-1-0.llm:50051"),
            _staged(host="llm-workers-0-0.llm"),
        ),
    ],
}
