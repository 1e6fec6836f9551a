"""Shapes the API server and the operators accept, which the checks once refused.

Each case pairs an accepted object (no error of its rule) with the nearest one that upstream
really refuses (the error stays):

- the MPI Operator v0.8.0 adds volumes to the pods it creates (ssh-auth to the launcher and
  the workers, mpi-job-config to the launcher; pkg/controller/mpi_job_controller.go), so a
  mount of one is no mount of an undefined volume;
- with only `generateName`, the API server generates the name (at most 58 characters of the
  prefix and 5 more; apiserver pkg/storage/names/generate.go) before the CRD's CEL rules,
  ValidateObjectMeta and the webhooks see the object;
- ValidateSecurityContext refuses allowPrivilegeEscalation: false only with the literal
  capability "CAP_SYS_ADMIN" (kubernetes pkg/apis/core/validation/validation.go).
"""

from __future__ import annotations

import copy

from tests.apicheck import pairs
from tests.support import REPO
from trainops.model import ERROR, Document
from trainops.schema.check import check_document
from trainops.schema.registry import SchemaRegistry, crd_location

REGISTRY = SchemaRegistry(["default", crd_location(REPO / "schemas")], "1.35", strict=True)


def errors(obj: dict, rule: str) -> list[tuple[str, str]]:
    _, findings = check_document(Document(obj, "false-refusals"), REGISTRY)
    return [(f.path, f.message) for f in findings if f.severity == ERROR and f.rule == rule]


def _mounts(obj: dict, role: str, *mounts: tuple[str, str]) -> dict:
    obj = copy.deepcopy(obj)
    container = obj["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": n, "mountPath": p} for n, p in mounts]
    return obj


def test_mounts_of_the_volumes_the_mpi_operator_adds_are_accepted():
    job = _mounts(
        pairs.mpijob(), "Launcher", ("ssh-auth", "/home/mpiuser/.ssh"), ("mpi-job-config", "/cfg")
    )
    job = _mounts(job, "Worker", ("ssh-auth", "/home/mpiuser/.ssh"))
    assert errors(job, "api-validation") == []


def test_mounts_of_volumes_nobody_adds_are_still_refused():
    # The operator adds mpi-job-config to the launcher only; "scratch" to no pod at all.
    job = _mounts(pairs.mpijob(), "Worker", ("mpi-job-config", "/cfg"), ("scratch", "/scratch"))
    found = errors(job, "api-validation")
    assert [path.rsplit(".", 2)[-2] for path, _ in found] == ["volumeMounts[0]", "volumeMounts[1]"]
    assert all("Not found" in message for _, message in found)


def test_generate_name_without_a_name_passes_cel_and_name_rules():
    for prefix in ("llama-7b-", "l" * 70):  # the API server cuts the prefix to 58 characters
        job = pairs.trainjob()
        job["metadata"] = {"generateName": prefix}
        assert errors(job, "cel") == [], prefix
        assert errors(job, "api-validation") == [], prefix


def test_a_generate_name_that_cannot_make_a_valid_name_is_still_refused():
    job = pairs.trainjob()
    job["metadata"] = {"generateName": "Llama-"}
    assert errors(job, "cel")  # the TrainJob CRD's DNS-1035 rule on the generated name
    assert errors(job, "api-validation")  # ValidateObjectMeta's prefix check


def _service(prefix: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"generateName": prefix},
        "spec": {"ports": [{"port": 80}]},
    }


def test_a_long_generate_name_is_cut_not_refused():
    # 61 characters: the prefix check masks the trailing '-' (60), the name is 58 + 5.
    assert errors(_service("s" * 60 + "-"), "api-validation") == []


def test_a_generate_name_over_the_kind_limit_is_still_refused():
    found = errors(_service("s" * 70), "api-validation")
    assert [path for path, _ in found] == ["metadata.generateName"]


def _escalation(capability: str) -> dict:
    obj = pairs.deployment()
    obj["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": [capability]},
    }
    return obj


def test_sys_admin_without_the_cap_prefix_passes_validation():
    assert errors(_escalation("SYS_ADMIN"), "api-validation") == []


def test_cap_sys_admin_without_escalation_is_still_refused():
    found = errors(_escalation("CAP_SYS_ADMIN"), "api-validation")
    assert len(found) == 1 and "CAP_SYS_ADMIN" in found[0][1]


def test_a_volume_without_a_source_is_defaulted_to_an_empty_dir():
    """`emptyDir:` left empty names no source; SetDefaults_Volume (pkg/apis/core/v1/
    defaults.go) makes it an emptyDir before validation. Two sources stay refused."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox:1.36"}],
            "volumes": [{"name": "scratch", "emptyDir": None}, {"name": "bare"}],
        },
    }
    assert errors(pod, "api-validation") == []
    both = copy.deepcopy(pod)
    both["spec"]["volumes"][0] = {"name": "scratch", "emptyDir": {}, "hostPath": {"path": "/x"}}
    assert [p for p, _ in errors(both, "api-validation")] == ["spec.volumes[0].hostPath"]
