"""Fixtures of the launchers area: the accelerate config file an `accelerate launch` reads
from a ConfigMap of the render (the baseline's PyTorchJob, four pods of eight GPUs), and
horovodrun's command line and config file (in the baseline MPIJob's launcher, or in the
PyTorchJob's pods). Each pair differs in the one setting the rule checks. MORE also holds
pairs of rules other areas declare, for what this area added to them (accelerate-shape
reading the config file, deepspeed-config-values' ZeRO gradient checks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml

from tests.policies.areas.frameworks import _deepspeed, _ds
from tests.policies.fixtures import NAMESPACE, Docs, edit, job, pods_of

ACCELERATE = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "MULTI_GPU",
    "mixed_precision": "bf16",
    "num_machines": 4,
    "num_processes": 32,
    "machine_rank": 0,
    "main_process_port": 29500,
    "rdzv_backend": "static",
    "same_network": True,
    "use_cpu": False,
    "debug": False,
}
FSDP2 = {
    "fsdp_version": 2,
    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
    "fsdp_state_dict_type": "SHARDED_STATE_DICT",
    "fsdp_reshard_after_forward": True,
    "fsdp_cpu_ram_efficient_loading": True,
    "fsdp_offload_params": False,
}
FSDP1 = {
    "fsdp_version": 1,
    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "fsdp_sharding_strategy": "FULL_SHARD",
    "fsdp_backward_prefetch": "BACKWARD_PRE",
    "fsdp_state_dict_type": "FULL_STATE_DICT",
    "fsdp_sync_module_states": True,
}
RANKS = ("--machine_rank", "$(RANK)", "--main_process_ip", "$(MASTER_ADDR)")


def _config(**changes: Any) -> dict[str, Any]:
    """The good config with keys changed (None drops one)."""
    config = json.loads(json.dumps(ACCELERATE))
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def _fsdp(base: dict[str, Any] = FSDP2, **changes: Any) -> dict[str, Any]:
    fsdp = {**base, **changes}
    return _config(distributed_type="FSDP", fsdp_config=fsdp)


def _accelerate(
    config: dict[str, Any] | str,
    *flags: str,
    path: str = "/etc/accelerate/config.yaml",
    key: str = "config.yaml",
    home: str | None = None,
    ranks: bool = True,
) -> Callable[[], Docs]:
    """The PyTorchJob's pods run `accelerate launch --config_file PATH FLAGS train.py` with
    the config from ConfigMap accelerate-config (key KEY) mounted at /etc/accelerate; with
    `home`, HF_HOME is set to it, the ConfigMap is mounted at HOME/accelerate and the
    command names no config file (accelerate reads its default one)."""

    def change(docs: Docs) -> None:
        text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "accelerate-config", "namespace": NAMESPACE},
                "data": {key: text},
            }
        )
        named = () if home else ("--config_file", path)
        for spec in pods_of(job(docs)):
            container = spec["containers"][0]
            given = RANKS if ranks else ()
            container["command"] = ["accelerate", "launch", *named, *given, *flags, "/app/train.py"]
            container.pop("args", None)
            mount = f"{home}/accelerate" if home else "/etc/accelerate"
            container["volumeMounts"].append({"name": "accelerate", "mountPath": mount})
            if home:
                container["env"].append({"name": "HF_HOME", "value": home})
            spec["volumes"].append(
                {"name": "accelerate", "configMap": {"name": "accelerate-config"}}
            )

    return edit(change)


GOOD = _accelerate(_config())
GOOD_FSDP2 = _accelerate(_fsdp())
GOOD_FSDP1 = _accelerate(_fsdp(FSDP1))
# accelerate config's own YAML, as `accelerate config` writes it ('no' quoted).
WRITTEN = (
    "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
    "mixed_precision: {precision}\nnum_machines: 4\nnum_processes: 32\nmachine_rank: 0\n"
    "use_cpu: false\n"
)

HOROVOD_HOSTS = ("-H", "worker-0:8,worker-1:8")


def _horovodrun(*flags: str, config: dict[str, Any] | None = None) -> Callable[[], Docs]:
    """The MPIJob's launcher runs `horovodrun FLAGS python train.py`; with `config`, a
    ConfigMap horovod-config (key horovod.yaml) mounted at /etc/horovod."""

    def change(docs: Docs) -> None:
        mpijob = job(docs, "MPIJob")
        launcher_spec = pods_of(mpijob)[0]
        launcher = launcher_spec["containers"][0]
        launcher["command"] = ["horovodrun", *flags, "python", "/app/train.py"]
        launcher["args"] = ["--epochs", "3"]
        if config is not None:
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "horovod-config", "namespace": NAMESPACE},
                    "data": {"horovod.yaml": yaml.safe_dump(config)},
                }
            )
            launcher.setdefault("volumeMounts", []).append(
                {"name": "horovod", "mountPath": "/etc/horovod"}
            )
            launcher_spec.setdefault("volumes", []).append(
                {"name": "horovod", "configMap": {"name": "horovod-config"}}
            )

    return edit(change)


def _horovod_pods(*flags: str) -> Callable[[], Docs]:
    """Every pod of the PyTorchJob runs `horovodrun FLAGS python train.py` itself."""

    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            container = spec["containers"][0]
            container["command"] = ["horovodrun", *flags, "python", "/app/train.py"]
            container.pop("args", None)

    return edit(change)


HOROVOD_CONFIG = {"controller": "gloo", "params": {"fusion_threshold_mb": 64, "cycle_time_ms": 5}}

FIXTURES = {
    "accelerate-config-file": (
        _accelerate(_config(num_gpus=8)),  # not a ClusterConfig field: ValueError
        GOOD,
    ),
    "horovodrun-args": (
        _horovodrun("-np", "16", "-H", "worker-0,worker-1"),  # no :slots
        _horovodrun("-np", "16", *HOROVOD_HOSTS),
    ),
}

MORE = {
    "accelerate-config-file": [
        (_accelerate(_config(distributed_type="MULTI-GPU")), GOOD),
        (_accelerate(_config(distributed_type=None)), GOOD),
        (_accelerate(_config(compute_environment="LOCAL")), GOOD),
        (  # an unquoted YAML no is the boolean false
            _accelerate(WRITTEN.format(precision="no")),
            _accelerate(WRITTEN.format(precision="'no'")),
        ),
        (_accelerate(_config(mixed_precision="bfloat16")), GOOD),
        (  # the command line may give what the config leaves out
            _accelerate(_config(num_processes=None)),
            _accelerate(_config(num_processes=None), "--num_processes", "32"),
        ),
        (  # the file the command names is not a key of the ConfigMap
            _accelerate(_config(), key="accelerate.yaml"),
            _accelerate(_config(), key="config.yaml"),
        ),
        (  # the default config, found through HF_HOME
            _accelerate(
                _config(num_gpus=8),
                "--num_processes",
                "32",
                home="/cache/hf",
                key="default_config.yaml",
            ),
            _accelerate(
                _config(), "--num_processes", "32", home="/cache/hf", key="default_config.yaml"
            ),
        ),
        (  # FSDP2 takes a boolean
            _accelerate(_fsdp(fsdp_reshard_after_forward="FULL_SHARD")),
            GOOD_FSDP2,
        ),
        (  # ... unless the command line overrides the config's value
            _accelerate(_fsdp(fsdp_reshard_after_forward="SHARD_GRAD_OP")),
            _accelerate(
                _fsdp(fsdp_reshard_after_forward="SHARD_GRAD_OP"),
                "--fsdp_reshard_after_forward",
                "false",
            ),
        ),
        (_accelerate(_fsdp(fsdp_state_dict_type="LOCAL_STATE_DICT")), GOOD_FSDP2),
        (_accelerate(_fsdp(fsdp_auto_wrap_policy="TRANSFORMER_WRAP")), GOOD_FSDP2),
        (
            _accelerate(_fsdp(fsdp_sync_module_states=False)),
            _accelerate(_fsdp(fsdp_sync_module_states=True)),
        ),
        (_accelerate(_fsdp(FSDP1, fsdp_sharding_strategy="FULL")), GOOD_FSDP1),
        (_accelerate(_fsdp(FSDP1, fsdp_backward_prefetch="BACKWARD")), GOOD_FSDP1),
        (  # FSDP1 never reads reshard_after_forward (the sharding strategy is set)
            _accelerate(_fsdp(FSDP1, fsdp_state_dict_type="SHARDED")),
            _accelerate(_fsdp(FSDP1, fsdp_reshard_after_forward="FULL_SHARD")),
        ),
        (
            _accelerate(_config(num_machines=1, gpu_ids="0")),
            _accelerate(_config(num_machines=1, gpu_ids="0,1,2,3,4,5,6,7")),
        ),
    ],
    "horovodrun-args": [
        (_horovodrun(*HOROVOD_HOSTS), _horovodrun("-np", "16", *HOROVOD_HOSTS)),
        (_horovodrun("-np", "32", *HOROVOD_HOSTS), _horovodrun("--num-proc=16", *HOROVOD_HOSTS)),
        (  # mpirun may be told to oversubscribe
            _horovodrun("-np", "32", "-H", "worker-0:8"),
            _horovodrun("-np", "32", "-H", "worker-0:8", "--mpi-args=--oversubscribe"),
        ),
        (  # elastic mode needs two hosts
            _horovodrun("-np", "8", "--min-np", "8", "-H", "worker-0:8"),
            _horovodrun("-np", "8", "--min-np", "8", *HOROVOD_HOSTS),
        ),
        (
            _horovodrun("-np", "8", "--min-np", "4"),
            _horovodrun(
                "-np", "8", "--min-np", "4", "--host-discovery-script", "/etc/mpi/discover_hosts.sh"
            ),
        ),
        (
            _horovodrun("-np", "16", *HOROVOD_HOSTS, "--hostfile", "/etc/mpi/hostfile"),
            _horovodrun("-np", "16", "--hostfile", "/etc/mpi/hostfile"),
        ),
        (
            _horovodrun("-np", "16", *HOROVOD_HOSTS, "--gloo", "--mpi"),
            _horovodrun("-np", "16", *HOROVOD_HOSTS, "--gloo"),
        ),
        (
            _horovodrun("-np", "16", *HOROVOD_HOSTS, "--fusion-threshold-mb", "-1"),
            _horovodrun("-np", "16", *HOROVOD_HOSTS, "--fusion-threshold-mb", "64"),
        ),
        (  # a templated host list is not judged
            _horovodrun("-np", "16", "-H", "worker-0, worker-1:8"),
            _horovodrun("-np", "16", "-H", "$(HOSTS)"),
        ),
        (
            _horovodrun(
                "-np",
                "16",
                *HOROVOD_HOSTS,
                "--config-file",
                "/etc/horovod/horovod.yaml",
                config={**HOROVOD_CONFIG, "controller": "nccl"},
            ),
            _horovodrun(
                "-np",
                "16",
                *HOROVOD_HOSTS,
                "--config-file",
                "/etc/horovod/horovod.yaml",
                config=HOROVOD_CONFIG,
            ),
        ),
        (
            _horovodrun(
                "-np",
                "16",
                *HOROVOD_HOSTS,
                "--config-file",
                "/etc/horovod/horovod.yaml",
                config={**HOROVOD_CONFIG, "params": {"cycle_time_ms": -5}},
            ),
            _horovodrun(
                "-np",
                "16",
                *HOROVOD_HOSTS,
                "--config-file",
                "/etc/horovod/horovod.yaml",
                "--cycle-time-ms",
                "5",
                config={**HOROVOD_CONFIG, "params": {"cycle_time_ms": -5}},
            ),
        ),
        (
            _horovodrun(
                "-np",
                "16",
                *HOROVOD_HOSTS,
                "--config-file",
                "/etc/horovod/missing.yaml",
                config=HOROVOD_CONFIG,
            ),
            _horovodrun(
                "-np",
                "16",
                *HOROVOD_HOSTS,
                "--config-file",
                "/etc/horovod/horovod.yaml",
                config=HOROVOD_CONFIG,
            ),
        ),
        (  # each pod of the PyTorchJob runs its own horovodrun on localhost
            _horovod_pods("-np", "8"),
            _horovod_pods("-np", "32", "-H", "$(HOROVOD_HOSTS)"),
        ),
    ],
}

# Pairs of rules declared in other areas (see the docstring).
MORE_OF_OTHER_AREAS = {
    "accelerate-shape": [
        (  # the config's machine_rank, shared by every pod, when the command gives none
            _accelerate(_config(), "--main_process_ip", "$(MASTER_ADDR)", ranks=False),
            GOOD,
        ),
        (  # ... unless torchrun's dynamic rendezvous assigns the ranks
            _accelerate(_config(), "--main_process_ip", "$(MASTER_ADDR)", ranks=False),
            _accelerate(
                _config(rdzv_backend="c10d"), "--main_process_ip", "$(MASTER_ADDR)", ranks=False
            ),
        ),
        (_accelerate(_config(num_machines=2)), GOOD),
        (_accelerate(_config(num_machines=None, num_processes=8)), GOOD),
    ],
    "deepspeed-config-values": [
        (_deepspeed(_ds(prescale_gradients=True)), _deepspeed(_ds(prescale_gradients=False))),
        (
            _deepspeed(_ds(gradient_predivide_factor=2.0)),
            _deepspeed(_ds(gradient_predivide_factor=1.0)),
        ),
        (  # stage 1 does not reduce-scatter the gradients: no assertion
            _deepspeed(_ds(gradient_predivide_factor=2.0, zero_optimization={"stage": 2})),
            _deepspeed(_ds(gradient_predivide_factor=2.0, zero_optimization={"stage": 1})),
        ),
        (
            _deepspeed(_ds(prescale_gradients=True)),
            _deepspeed(
                _ds(
                    prescale_gradients=True,
                    zero_optimization={"stage": 3, "reduce_scatter": False},
                )
            ),
        ),
        (
            _deepspeed(_ds(communication_data_type="fp8")),
            _deepspeed(_ds(communication_data_type="bf16")),
        ),
    ],
}
MORE.update(MORE_OF_OTHER_AREAS)
