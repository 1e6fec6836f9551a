"""Fixtures of the frameworks area: Megatron-LM arguments, DeepSpeed configs in ConfigMaps,
KubeRay objects, Open MPI MCA parameters and UCX settings. Each pair is the baseline's
PyTorchJob (four pods of eight GPUs: 32 ranks) or MPIJob, or one RayJob, with the one
setting the rule checks written wrong and right."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import NAMESPACE, Docs, edit, first, job, only, pods_of, set_env

# Megatron-LM on the baseline's 32 ranks: TP 4 x PP 2 leaves a data-parallel size of 4.
MEGATRON = {
    "--tensor-model-parallel-size": "4",
    "--pipeline-model-parallel-size": "2",
    "--num-layers": "32",
    "--hidden-size": "4096",
    "--num-attention-heads": "32",
    "--seq-length": "4096",
    "--max-position-embeddings": "4096",
    "--micro-batch-size": "1",
    "--global-batch-size": "64",
}
MEGATRON_SWITCHES = (
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--bf16",
)


def _megatron(
    drop: tuple[str, ...] = (), cuda_connections: str | None = "1", **values: str
) -> Callable[[], Docs]:
    """The PyTorchJob running pretrain_gpt.py; `values` override flags ('--x_y' as x_y),
    a value of "" gives a switch, `drop` removes flags."""
    flags = {**MEGATRON, **{f"--{k.replace('_', '-')}": v for k, v in values.items()}}
    switches = [s for s in MEGATRON_SWITCHES if s not in drop]
    args = [w for k, v in flags.items() if k not in drop for w in ((k, v) if v else (k,))]

    def change(docs: Docs) -> None:
        pytorch = job(docs)
        for spec in pods_of(pytorch):
            container = spec["containers"][0]
            container["command"] = [
                "/bin/sh",
                "-c",
                'exec trainer-launch --nproc-per-node=8 /opt/Megatron-LM/pretrain_gpt.py "$@"',
                "trainer",
            ]
            container["args"] = [*args, *switches]
        set_env(pytorch, "CUDA_DEVICE_MAX_CONNECTIONS", cuda_connections)

    return edit(change)


DS_CONFIG = {
    "train_batch_size": 256,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
}


def _deepspeed(
    config: dict[str, Any] | str, *args: str, hf: bool = False, key: str = "ds.json"
) -> Callable[[], Docs]:
    """The PyTorchJob training with a DeepSpeed config from a ConfigMap of the render (the
    config is stored under `key`; the command names ds.json)."""

    def change(docs: Docs) -> None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "ds-config", "namespace": NAMESPACE},
                "data": {key: config if isinstance(config, str) else json.dumps(config)},
            }
        )
        flag = "--deepspeed" if hf else "--deepspeed_config"
        for spec in pods_of(job(docs)):
            container = spec["containers"][0]
            container["command"] = [
                "/bin/sh",
                "-c",
                'exec trainer-launch --nproc-per-node=8 /app/train.py "$@"',
                "trainer",
            ]
            container["args"] = [flag, "/etc/deepspeed/ds.json", *args]
            container["volumeMounts"].append({"name": "ds", "mountPath": "/etc/deepspeed"})
            spec["volumes"].append({"name": "ds", "configMap": {"name": "ds-config"}})

    return edit(change)


def _ds(**changes: Any) -> dict[str, Any]:
    config = json.loads(json.dumps(DS_CONFIG))
    for key, value in changes.items():
        if key == "stage":
            config["zero_optimization"]["stage"] = value
        elif value is None:
            config.pop(key)
        else:
            config[key] = value
    return config


def _rayjob(**spec: Any) -> Callable[[], dict]:
    def build() -> dict:
        worker = {
            "groupName": "gpu",
            "replicas": 2,
            "minReplicas": 2,
            "maxReplicas": 2,
            "rayStartParams": {},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "ray-worker",
                            "image": "rayproject/ray:2.52.0-gpu",
                            "resources": {"limits": {"nvidia.com/gpu": 8}},
                        }
                    ]
                }
            },
        }
        cluster = {
            "rayVersion": "2.52.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}
                },
            },
            "workerGroupSpecs": [worker],
        }
        body = {
            "entrypoint": "python /app/train.py",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "rayClusterSpec": cluster,
        }
        for key, value in spec.items():
            if key == "worker":
                worker.update(value)
            elif value is None:
                body.pop(key, None)
            else:
                body[key] = value
        return {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "ray-train", "namespace": NAMESPACE},
            "spec": body,
        }

    return build


def _torchrun(*flags: str) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["containers"][0]["command"] = ["torchrun", *flags, "-m", "trainer"]

    return edit(change)


def _accelerate(*flags: str) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["containers"][0]["command"] = ["accelerate", "launch", *flags, "/app/train.py"]
            spec["containers"][0].pop("args", None)

    return edit(change)


def _annotated(build: Callable[[], dict], **annotations: str) -> Callable[[], dict]:
    """A RayJob with GCS fault tolerance options (and the given annotations)."""

    def changed() -> dict:
        doc = build()
        doc["metadata"]["annotations"] = annotations
        doc["spec"]["rayClusterSpec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
        return doc

    return changed


def _deepspeed_launcher(*flags: str, gpus: bool = True) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            container = spec["containers"][0]
            container["command"] = ["deepspeed", *flags, "/app/train.py"]
            container.pop("args", None)
            if not gpus:
                container["resources"]["limits"].pop("nvidia.com/gpu")

    return edit(change)


def _mpi_env(**env: str) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        launcher = first(job(docs, "MPIJob"))
        launcher["env"].extend({"name": k, "value": v} for k, v in env.items())

    return edit(change)


def _ucx(value: str, name: str = "UCX_TLS", rdma: bool = True) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        pytorch = job(docs)
        set_env(pytorch, name, value)
        if rdma:
            return
        for replica in pytorch["spec"]["pytorchReplicaSpecs"].values():
            replica["template"]["metadata"]["annotations"].pop("k8s.v1.cni.cncf.io/networks")
            for container in replica["template"]["spec"]["containers"]:
                container["resources"]["limits"].pop("nvidia.com/roce_vf")

    return edit(change)


FIXTURES = {
    "megatron-parallel-sizes": (
        _megatron(num_experts="6", expert_model_parallel_size="4"),
        _megatron(num_experts="8", expert_model_parallel_size="4"),
    ),
    "megatron-batch-size": (_megatron(global_batch_size="66"), _megatron()),
    "megatron-attention-heads": (_megatron(num_attention_heads="30"), _megatron()),
    "megatron-pipeline-layers": (_megatron(num_layers="31"), _megatron()),
    "megatron-sequence-parallel": (
        _megatron(tensor_model_parallel_size="1"),
        _megatron(tensor_model_parallel_size="1", drop=("--sequence-parallel",)),
    ),
    "megatron-cuda-device-max-connections": (_megatron(cuda_connections=None), _megatron()),
    "megatron-optimizer-flags": (
        _megatron(drop=("--use-distributed-optimizer",)),
        _megatron(),
    ),
    "megatron-sequence-length": (_megatron(max_position_embeddings="2048"), _megatron()),
    "megatron-removed-args": (
        _megatron(checkpoint_activations=""),
        _megatron(recompute_activations=""),
    ),
    "megatron-training-args": (
        _megatron(save="/checkpoints/gpt"),
        _megatron(save="/checkpoints/gpt", save_interval="1000"),
    ),
    "torchrun-flag-values": (
        _torchrun("--nproc-per-node=gpus"),
        _torchrun("--nproc-per-node=gpu"),
    ),
    "accelerate-launch-flags": (
        _accelerate("--multi_gpu", "--use_deepspeed"),
        _accelerate("--use_deepspeed"),
    ),
    "deepspeed-config-file": (
        _deepspeed(_ds(), key="ds_config.json"),
        _deepspeed(_ds()),
    ),
    "deepspeed-launcher-gpus": (
        _deepspeed_launcher("--num_gpus", "16"),
        _deepspeed_launcher("--num_gpus", "8"),
    ),
    "deepspeed-batch-size": (
        _deepspeed(_ds(train_batch_size=512)),
        _deepspeed(_ds()),
    ),
    "deepspeed-config-values": (_deepspeed(_ds(stage=4)), _deepspeed(_ds())),
    "kuberay-cluster-spec": (
        only(_rayjob(worker={"minReplicas": 3})),
        only(_rayjob()),
    ),
    "kuberay-rayjob-spec": (
        only(_rayjob(shutdownAfterJobFinishes=False)),
        only(_rayjob()),
    ),
    "kuberay-gpu-resources": (
        only(_rayjob(shutdownAfterJobFinishes=None, ttlSecondsAfterFinished=None)),
        only(_rayjob(ttlSecondsAfterFinished=None)),
    ),
    "mpi-tcp-include-exclude": (
        _mpi_env(OMPI_MCA_oob_tcp_if_include="eth0", OMPI_MCA_oob_tcp_if_exclude="lo"),
        _mpi_env(OMPI_MCA_oob_tcp_if_include="eth0"),
    ),
    "ucx-tls-rdma-device": (
        _ucx("rc,sm,cuda_copy", rdma=False),
        _ucx("rc,sm,cuda_copy"),
    ),
    "ucx-net-devices": (
        _ucx("mlx5_0,mlx5_1", name="UCX_NET_DEVICES"),
        _ucx("mlx5_0:1,mlx5_1:1", name="UCX_NET_DEVICES"),
    ),
}

MORE = {
    "megatron-parallel-sizes": [
        (
            # 32 ranks over TP 4 x CP 3 = 12.
            _megatron(
                context_parallel_size="3",
                pipeline_model_parallel_size="1",
                seq_length="4098",
                max_position_embeddings="8192",
            ),
            _megatron(
                context_parallel_size="2",
                pipeline_model_parallel_size="1",
                seq_length="4096",
                max_position_embeddings="8192",
            ),
        )
    ],
    "megatron-pipeline-layers": [
        (
            _megatron(pipeline_model_parallel_size="1", num_layers_per_virtual_pipeline_stage="4"),
            _megatron(num_layers_per_virtual_pipeline_stage="4"),
        )
    ],
    "megatron-removed-args": [
        (_megatron(fp16=""), _megatron()),
    ],
    "megatron-training-args": [
        (_megatron(lr="1e-4", min_lr="3e-4"), _megatron(lr="3e-4", min_lr="1e-5")),
        (_megatron(drop=("--max-position-embeddings",)), _megatron()),
        (
            _megatron(train_iters="1000", lr_decay_samples="100000"),
            _megatron(train_iters="1000", lr_decay_iters="1000"),
        ),
        (_megatron(use_checkpoint_args=""), _megatron(use_checkpoint_args="", load="/ckpt")),
        (
            _megatron(use_checkpoint_args="", load="/ckpt", non_persistent_ckpt_type="local"),
            _megatron(use_checkpoint_args="", load="/ckpt", non_persistent_ckpt_type="global"),
        ),
        (
            _megatron(non_persistent_ckpt_type="in_memory"),
            _megatron(non_persistent_ckpt_type="local"),
        ),
        (_megatron(seed="0"), _megatron(seed="1234")),
        (_megatron(seed="-7"), _megatron(seed="$(SEED)")),
    ],
    "torchrun-flag-values": [
        (_torchrun("--nnodes=4:2"), _torchrun("--nnodes=2:4")),
        (_torchrun("--rdzv-backend=c10"), _torchrun("--rdzv-backend=c10d")),
    ],
    "accelerate-launch-flags": [
        (
            _accelerate("--multi_gpu", "--num_processes", "1"),
            _accelerate("--multi_gpu", "--num_processes", "8"),
        ),
    ],
    "deepspeed-launcher-gpus": [
        (_deepspeed_launcher(gpus=False), _deepspeed_launcher()),
    ],
    "deepspeed-config-file": [
        (
            _deepspeed('{"train_batch_size": 256, "train_batch_size": 128}'),
            _deepspeed('{"train_batch_size": 256}'),
        ),
    ],
    "deepspeed-batch-size": [
        (_deepspeed(_ds(gradient_accumulation_steps=0, train_batch_size=None)), _deepspeed(_ds())),
        (
            _deepspeed(
                _ds(train_micro_batch_size_per_gpu=8), "--per_device_train_batch_size", "4", hf=True
            ),
            _deepspeed(
                _ds(
                    train_micro_batch_size_per_gpu="auto",
                    train_batch_size="auto",
                    gradient_accumulation_steps="auto",
                ),
                "--per_device_train_batch_size",
                "4",
                hf=True,
            ),
        ),
    ],
    "deepspeed-config-values": [
        (  # precision_config.py: loss_scale must be a number (0: dynamic)
            _deepspeed(_ds(fp16={"enabled": True, "loss_scale": "dynamic"}, bf16=None)),
            _deepspeed(_ds(fp16={"enabled": True, "loss_scale": 0}, bf16=None)),
        ),
        (  # elasticity/config.py: min_gpus <= max_gpus
            _deepspeed(_ds(elasticity={"enabled": True, "min_gpus": 64, "max_gpus": 16})),
            _deepspeed(_ds(elasticity={"enabled": True, "min_gpus": 16, "max_gpus": 64})),
        ),
        (  # tag_validation is upper-cased, then one of WARN, IGNORE, FAIL
            _deepspeed(_ds(checkpoint={"tag_validation": "strict"})),
            _deepspeed(_ds(checkpoint={"tag_validation": "Fail"})),
        ),
        (
            _deepspeed(_ds(checkpoint={"writer": {"type": "torch"}})),
            _deepspeed(_ds(checkpoint={"writer": {"type": "fast"}})),
        ),
        (
            _deepspeed(_ds(fp16={"enabled": True})),
            _deepspeed(_ds(fp16={"enabled": False})),
        ),
        (  # a misspelt key: the ZeRO model forbids extra keys
            _deepspeed(_ds(zero_optimization={"stage": 2, "offload_optimiser": {"device": "cpu"}})),
            _deepspeed(_ds(zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}})),
        ),
        (  # OffloadDeviceEnum is lower case
            _deepspeed(_ds(zero_optimization={"stage": 3, "offload_param": {"device": "NVMe"}})),
            _deepspeed(_ds(zero_optimization={"stage": 3, "offload_param": {"device": "nvme"}})),
        ),
        (  # partial optimizer offload asserts stage 3
            _deepspeed(
                _ds(
                    zero_optimization={
                        "stage": 2,
                        "offload_optimizer": {"device": "cpu", "ratio": 0.3},
                    }
                )
            ),
            _deepspeed(
                _ds(
                    zero_optimization={
                        "stage": 3,
                        "offload_optimizer": {"device": "cpu", "ratio": 0.3},
                    }
                )
            ),
        ),
    ],
    "kuberay-rayjob-spec": [
        (only(_rayjob(rayClusterSpec=None)), only(_rayjob())),
        (
            only(_rayjob(submissionMode="HTTPMode", submitterConfig={"backoffLimit": 2})),
            only(_rayjob(submissionMode="K8sJobMode", submitterConfig={"backoffLimit": 2})),
        ),
    ],
    "kuberay-cluster-spec": [
        (
            only(_annotated(_rayjob(), **{"ray.io/ft-enabled": "true"})),
            only(_annotated(_rayjob())),
        ),
    ],
    "mpi-tcp-include-exclude": [
        (
            _mpi_env(
                OMPI_MCA_btl="tcp,self",
                OMPI_MCA_btl_tcp_if_include="net1",
                OMPI_MCA_btl_tcp_if_exclude="lo",
            ),
            _mpi_env(OMPI_MCA_btl="tcp,self", OMPI_MCA_btl_tcp_if_include="net1"),
        )
    ],
}
