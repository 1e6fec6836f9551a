"""The reference articles' own YAML gets the findings a careful reviewer would raise.

Each expected (resource, rule) pair says why a reviewer would flag it. The test
asserts the exact set of errors and warnings, so both a missed problem and a
new false alarm fail it. Info findings are advice and not listed: torchrun's 30 s
shutdown timeout beside the default 30 s grace is one (the workers get 30 s either
way; grace-period-short says the grace is short).
"""

from __future__ import annotations

import json

import pytest

from tests.support import REPO

SEEDS = REPO / "tests" / "seeds"

PT000 = "PyTorchJob//pytorch-distributed-training"
RESNET = "PyTorchJob/default/resnet-distributed-training"
GANG = "PyTorchJob//gang-scheduled-training"
TF002 = "TFJob/default/tensorflow-distributed"
LLAMA = "PyTorchJob/ml-training/llama-finetune"
DEEPSPEED = "MPIJob/ml-training/deepspeed-training"
ELASTIC = "PyTorchJob//elastic-training"
MNIST = "PyTorchJob/ml-training/distributed-mnist"
LLM = "PyTorchJob/ai-training/llm-finetune"
TF004 = "TFJob/ai-training/tf-distributed"
HOROVOD = "MPIJob/ai-training/horovod-training"

EXPECTED = {
    # One GPU per pod and no DataLoader workers need no bigger /dev/shm: 000 and the TFJob of
    # 002 get no dev-shm-missing. c10d elastic jobs keep their rendezvous in their own store:
    # no elastic-rdzv-id. NCCL_NET_GDR_LEVEL=5 is valid (SYS).
    "000-training-on-kubernetes.yaml": {
        (PT000, "image-pinned"): "pytorch/pytorch:latest changes under a running job",
        (PT000, "checkpoint-missing"): "a 4-node job with nowhere to checkpoint",
        (PT000, "grace-period-short"): "default 30 s grace: no time for an emergency save",
        (PT000, "gpu-node-placement"): "nothing selects the GPU nodes the job needs",
        (PT000, "nccl-transport-evidence"): "no NCCL_DEBUG: a socket fallback goes unnoticed",
        (PT000, "resources-set"): "no CPU or memory requests next to the GPUs",
    },
    "002-distributed-training-guide.yaml": {
        (GANG, "schema"): "schedulerName is not a PyTorchJob field; Master has no containers",
        (GANG, "webhook"): "the operator's webhook refuses a replica without containers",
        (GANG, "api-validation"): "the Master's pods would be refused: a pod needs a container",
        (RESNET, "checkpoint-missing"): "the dataset volume is read-only; no checkpoint volume",
        (RESNET, "grace-period-short"): "default grace period",
        (RESNET, "gpu-node-placement"): "no GPU node selection",
        (
            "Service//training-metrics",
            "service-selects-pods",
        ): "selects job-name, a label the operator's pods do not carry: no endpoints",
        (TF002, "checkpoint-missing"): "multi-node job without checkpoints",
        (TF002, "grace-period-short"): "default grace period",
        (TF002, "gpu-node-placement"): "no GPU node selection",
        (TF002, "nccl-transport-evidence"): "no NCCL_DEBUG",
        (TF002, "resources-set"): "memory set, CPU not",
    },
    "003-distributed-training-infrastructure.yaml": {
        (
            "ClusterPolicy//cluster-policy",
            "argocd-single-owner",
        ): "the gpu-operator chart renders the same ClusterPolicy: two owners",
        (
            "NetworkAttachmentDefinition/ml-training/ib-sriov-network",
            "nad-sriov-resource-name",
        ): "an ib-sriov network without resourceName: Multus passes no VF, pods fail to start",
        (
            "ClusterPolicy//cluster-policy",
            "schema",
        ): "the article's ClusterPolicy lacks the spec fields the CRD requires",
        (
            "NetworkAttachmentDefinition/ml-training/roce-network",
            "nad-host-local-ipam",
        ): "host-local hands every node the same addresses",
        (
            "NetworkAttachmentDefinition/ml-training/ib-host-device",
            "nad-host-local-ipam",
        ): "host-local on a multi-node network",
        (
            "NetworkAttachmentDefinition/ml-training/training-network",
            "nad-host-local-ipam",
        ): "host-local on a multi-node network",
        (
            "PersistentVolumeClaim/ml-training/training-checkpoints",
            "pvc-empty-storage-class",
        ): 'storageClassName "" is commented "use default" but disables provisioning',
        ("Pod/ml-training/training-worker-0", "resources-set"): "no requests at all",
        (
            LLAMA,
            "rdma-resource-missing",
        ): "NCCL_IB_DISABLE=0 on a 'RoCE' job that requests no RDMA device: sockets",
        (LLAMA, "grace-period-short"): "default grace period",
        (LLAMA, "gpu-node-placement"): "tolerates the GPU taint but selects no GPU nodes",
        (
            DEEPSPEED,
            "argument-packs-flag-and-value",
        ): "'-x NCCL_DEBUG=INFO' reaches mpirun as one unknown option",
        (DEEPSPEED, "nccl-socket-ifname"): "ranks attach net1 but nothing reaches them",
        (DEEPSPEED, "checkpoint-missing"): "no checkpoint volume for a multi-node job",
        (DEEPSPEED, "grace-period-short"): "default grace period",
        (
            DEEPSPEED,
            "mpirun-hostfile",
        ): "no --hostfile: under Open MPI 5 every rank runs on the launcher",
        (DEEPSPEED, "gpu-node-placement"): "no GPU node selection",
        (DEEPSPEED, "nccl-transport-evidence"): "NCCL_DEBUG never reaches the ranks",
        (ELASTIC, "webhook"): "the webhook refuses a PyTorchJob without a container named pytorch",
        (ELASTIC, "rendezvous-endpoint"): "names elastic-training-master-0 in a Worker-only job",
        (ELASTIC, "dev-shm-missing"): "4 GPUs per pod, 64 MiB /dev/shm",
        (ELASTIC, "checkpoint-missing"): "elastic restarts resume from nothing",
        (ELASTIC, "grace-period-short"): "default grace period",
        (ELASTIC, "gpu-node-placement"): "no GPU node selection",
        (ELASTIC, "nccl-transport-evidence"): "no NCCL_DEBUG",
        (ELASTIC, "resources-set"): "GPUs only, no CPU or memory",
        (MNIST, "checkpoint-missing"): "the Worker mounts no checkpoint volume",
        (MNIST, "nccl-socket-ifname"): "training-network is attached but NCCL may use eth0",
        (MNIST, "grace-period-short"): "default grace period",
        (MNIST, "gpu-node-placement"): "no GPU node selection",
    },
    "004-training-operator-recipe.yaml": {
        (LLM, "rendezvous-endpoint"): "$(MASTER_ADDR) in a Worker-only elastic job is never set",
        (
            LLM,
            "elastic-metrics-under-gitops",
        ): "an HPA from elasticPolicy.metrics fights Git's count",
        (LLM, "read-only-write-path"): "the Hugging Face cache is on the read-only /data mount",
        (LLM, "nccl-ib-hca-prefix"): "NCCL_IB_HCA=mlx5 selects every mlx5 device",
        (LLM, "rdma-ipc-lock"): "RDMA device without IPC_LOCK: memory registration fails",
        (LLM, "grace-period-short"): "default grace period",
        (TF004, "dev-shm-missing"): "8 GPUs per pod and no /dev/shm volume",
        (TF004, "checkpoint-missing"): "multi-node job without checkpoints",
        (TF004, "grace-period-short"): "default grace period",
        (TF004, "gpu-node-placement"): "no GPU node selection",
        (TF004, "nccl-transport-evidence"): "no NCCL_DEBUG",
        (TF004, "resources-set"): "GPUs only",
        (TF004, "dataset-claim-writable"): "every replica can write the training-data claim",
        (HOROVOD, "argument-packs-flag-and-value"): "'-x NCCL_DEBUG=INFO' as one element",
        (
            HOROVOD,
            "mpirun-hostfile",
        ): "no --hostfile: under Open MPI 5 every rank runs on the launcher",
        (HOROVOD, "image-pinned"): "horovod/horovod:latest-gpu",
        (HOROVOD, "run-ttl"): "a TTL under Argo CD self-heal re-runs the finished job",
        (HOROVOD, "checkpoint-missing"): "no checkpoint volume",
        (HOROVOD, "grace-period-short"): "default grace period",
        (HOROVOD, "gpu-node-placement"): "no GPU node selection",
        (HOROVOD, "nccl-transport-evidence"): "NCCL_DEBUG never reaches the ranks",
        (HOROVOD, "resources-set"): "workers: GPUs only",
    },
}


def test_every_seed_file_is_listed():
    assert {p.name for p in SEEDS.glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_seed_gets_the_reviewers_findings(trainops, name):
    run = trainops("validate", "--format", "json", str(SEEDS / name))
    findings = json.loads(run.out)["findings"]
    errors = any(f["severity"] == "error" for f in findings)
    assert run.code == (1 if errors else 0) and "Traceback" not in run.err
    found = {(f["resource"], f["rule"]) for f in findings if f["severity"] != "info"}
    expected = set(EXPECTED[name])
    assert found - expected == set(), "unexpected findings"
    assert expected - found == set(), "missed findings"
