"""Real-world manifests (Kubeflow's own examples) go through validate without crashes.

Every schema error they get is listed here with the reason it is genuine, so a
change that adds a false positive or loses a real error fails this test.
"""

from __future__ import annotations

import json

from tests.support import CORPUS

EXAMPLES = CORPUS / "kubeflow-training-operator-v1.9.0-examples"
MPI_EXAMPLES = CORPUS / "kubeflow-mpi-operator-v0.8.0-examples"

# (file relative to the examples, path of the finding): why the API server rejects it.
GENUINE_ERRORS = {
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Master.template.apiVersion",
    ): "a pod template has no apiVersion (left over from the v1alpha1 API)",
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Master.template.kind",
    ): "a pod template has no kind",
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Worker.template.apiVersion",
    ): "a pod template has no apiVersion",
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Worker.template.kind",
    ): "a pod template has no kind",
}


def test_corpus_validates_without_crashes_and_only_genuine_errors(trainops):
    run = trainops("validate", "--no-policies", "--format", "json", str(EXAMPLES))
    assert run.code == 1, run.err
    assert "Traceback" not in run.err
    report = json.loads(run.out)
    assert report["summary"]["targets"] == 31
    assert report["summary"]["resources"] == 33
    found = {
        (f["source"].split(":")[0].split("examples/", 1)[1], f["path"]) for f in report["findings"]
    }
    assert found == set(GENUINE_ERRORS)
    assert all(f["rule"] == "schema" and f["severity"] == "error" for f in report["findings"])


def test_mpi_operator_v2beta1_examples_have_no_schema_error(trainops):
    """Two of them leave the Worker's `command:` empty (null): the API server prunes a
    null field of a custom resource before validating it, so that is not an error."""
    run = trainops("validate", "--no-policies", "--format", "json", str(MPI_EXAMPLES))
    assert run.code == 0, run.out
    report = json.loads(run.out)
    assert (report["summary"]["targets"], report["summary"]["resources"]) == (5, 5)
    assert report["findings"] == []
    null_command = (MPI_EXAMPLES / "pi/pi-intel.yaml").read_text()
    assert "            command:\n            args:" in null_command


def test_corpus_through_the_kubeconform_front_end(trainops):
    schemas = str(CORPUS.parents[1] / "schemas")
    location = (
        schemas + "/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}{{.StrictSuffix}}.json"
    )
    run = trainops(
        "kubeconform",
        "-strict",
        "-summary",
        "-schema-location",
        "default",
        "-schema-location",
        location,
        str(EXAMPLES),
        env={"TRAINOPS_KUBECONFORM": "builtin"},
    )
    assert run.out.splitlines()[-1] == (
        "Summary: 33 resources found in 31 files - Valid: 32, Invalid: 1, Errors: 0, Skipped: 0"
    )


# Policy errors on the corpus, reviewed: every image is :latest; the GPU examples keep
# the 64 MiB /dev/shm; two elastic examples share torchrun's default rendezvous id
# "none"; the DeepSpeed demo checkpoints into the container filesystem
# (--checkpoint_dir /root/deepspeed_data, not a mount). CPU-only examples get no
# NCCL, /dev/shm or checkpoint findings.
_LATEST = ("image-pinned",)
POLICY_ERRORS = {
    ("jax/cpu-demo/demo.yaml", _LATEST),
    ("jax/jax-dist-spmd-mnist/jaxjob_dist_spmd_mnist_gloo.yaml", _LATEST),
    (
        "pytorch/deepspeed-demo/pytorch_deepspeed_demo.yaml",
        ("checkpoint-dir-not-mounted", "dev-shm-missing", "image-pinned"),
    ),
    ("pytorch/elastic/echo/echo.yaml", ("elastic-rdzv-id", "image-pinned")),
    ("pytorch/elastic/etcd.yaml", _LATEST),
    ("pytorch/elastic/imagenet/imagenet.yaml", ("elastic-rdzv-id", "image-pinned")),
    ("pytorch/mnist/v1/pytorch_job_mnist_gloo.yaml", ("dev-shm-missing", "image-pinned")),
    ("pytorch/mnist/v1/pytorch_job_mnist_mpi.yaml", ("dev-shm-missing", "image-pinned")),
    ("pytorch/mnist/v1/pytorch_job_mnist_nccl.yaml", ("dev-shm-missing", "image-pinned")),
    ("pytorch/smoke-dist/pytorch_job_sendrecv.yaml", _LATEST),
    ("tensorflow/dist-mnist/tf_job_mnist.yaml", _LATEST),
    (
        "tensorflow/distribution_strategy/multi_worker_tfjob.yaml",
        ("dev-shm-missing", "image-pinned"),
    ),
    ("tensorflow/mnist_with_summaries/tf_job_mnist.yaml", _LATEST),
    ("tensorflow/simple.yaml", _LATEST),
    ("xgboost/smoke-dist/xgboostjob_v1_rabit_test.yaml", _LATEST),
    ("xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml", _LATEST),
    ("xgboost/xgboost-dist/xgboostjob_v1_iris_predict.yaml", _LATEST),
    ("xgboost/xgboost-dist/xgboostjob_v1_iris_predict_local.yaml", _LATEST),
    ("xgboost/xgboost-dist/xgboostjob_v1_iris_train.yaml", _LATEST),
    ("xgboost/xgboost-dist/xgboostjob_v1_iris_train_local.yaml", _LATEST),
    ("xgboost/xgboostjob.yaml", _LATEST),
}


def test_policy_findings_on_the_corpus_are_the_reviewed_ones(trainops):
    run = trainops("validate", "--format", "json", str(EXAMPLES))
    assert run.code == 1 and "Traceback" not in run.err
    findings = json.loads(run.out)["findings"]
    errors = {
        (f["source"].split(":")[0].split("examples/", 1)[1], f["rule"])
        for f in findings
        if f["severity"] == "error" and f["rule"] != "schema"
    }
    assert errors == {(path, rule) for path, rules in POLICY_ERRORS for rule in rules}
    warnings = {f["rule"] for f in findings if f["severity"] == "warning"}
    assert warnings == {
        "checkpoint-missing",
        "dev-shm-not-memory",
        "gpu-node-placement",
        "grace-period-short",
        "nccl-transport-evidence",
        "resources-set",
        "restart-budget",
    }


# MPIJob v2beta1 examples of the MPI Operator v0.8.0, reviewed: the Horovod and benchmark
# images are untagged or :latest; the benchmark's GPU Workers keep the 64 MiB /dev/shm and
# have no checkpoint volume, node selection, resources or grace period; pi sets a TTL that
# Argo CD's self-heal would undo. The MPI rules find nothing: every launcher forwards or
# (Intel, MPICH) passes its environment, -n matches Workers x slots, and pi's keys sit in
# the home of its uid-1000 user.
MPI_REVIEWED = {
    ("horovod/tensorflow-mnist.yaml", "image-pinned", "error"),
    ("pi/pi.yaml", "run-ttl", "warning"),
    ("tensorflow-benchmarks/tensorflow-benchmarks.yaml", "image-pinned", "error"),
    ("tensorflow-benchmarks/tensorflow-benchmarks.yaml", "dev-shm-missing", "error"),
    ("tensorflow-benchmarks/tensorflow-benchmarks.yaml", "checkpoint-missing", "warning"),
    ("tensorflow-benchmarks/tensorflow-benchmarks.yaml", "gpu-node-placement", "warning"),
    ("tensorflow-benchmarks/tensorflow-benchmarks.yaml", "grace-period-short", "warning"),
    ("tensorflow-benchmarks/tensorflow-benchmarks.yaml", "resources-set", "warning"),
}


def test_policy_findings_on_the_mpi_operator_examples_are_the_reviewed_ones(trainops):
    run = trainops("validate", "--format", "json", str(MPI_EXAMPLES))
    assert run.code == 1 and "Traceback" not in run.err
    found = {
        (f["source"].split("examples/", 1)[1].split(":")[0], f["rule"], f["severity"])
        for f in json.loads(run.out)["findings"]
        if f["severity"] != "info"
    }
    assert found == MPI_REVIEWED


RUNTIMES = CORPUS / "kubeflow-trainer-v2.3.0-runtimes"


def test_upstream_trainer_runtimes_have_no_schema_error(trainops):
    run = trainops("validate", "--no-policies", "--format", "json", str(RUNTIMES))
    assert run.code == 0, run.out
    report = json.loads(run.out)
    assert (report["summary"]["targets"], report["summary"]["resources"]) == (3, 12)
    assert report["findings"] == []


# Errors on Kubeflow Trainer v2.3.0's own runtimes (manifests/base/runtimes), reviewed:
# the base names its images without a tag (upstream's overlays/runtimes adds v2.3.0, so
# applied as they are they pull :latest), and the torchtune runtimes give their trainer
# GPUs with the container's 64 MiB /dev/shm. Warnings: no resources, checkpoint volume,
# GPU node selection, grace period or NCCL transport logging; all by upstream's design
# for a generic runtime, and why this repository generates its own per cluster.
RUNTIME_ERRORS = {
    ("deepspeed-distributed", "image-pinned"),
    ("mlx-distributed", "image-pinned"),
    ("xgboost-distributed", "image-pinned"),
    ("torch-distributed-with-cache", "image-pinned"),
    *(
        (name, rule)
        for name in ("torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b")
        for rule in ("image-pinned", "dev-shm-missing")
    ),
}


def test_policy_findings_on_the_upstream_trainer_runtimes_are_the_reviewed_ones(trainops):
    run = trainops("validate", "--format", "json", str(RUNTIMES))
    assert run.code == 1 and "Traceback" not in run.err
    findings = json.loads(run.out)["findings"]
    errors = {
        (f["resource"].rsplit("/", 1)[1], f["rule"]) for f in findings if f["severity"] == "error"
    }
    assert errors == RUNTIME_ERRORS
    warnings = {f["rule"] for f in findings if f["severity"] == "warning"}
    assert warnings == {
        "checkpoint-missing",
        "gpu-node-placement",
        "grace-period-short",
        "nccl-transport-evidence",
        "resources-set",
    }
