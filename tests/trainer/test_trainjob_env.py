"""trainer-launch under Kubeflow Trainer v2's torch runtime: two "nodes" on this machine,
each started with the runtime's own command and the variables Trainer v2.3.0's torch
plugin injects (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the Job completion
index, PET_MASTER_ADDR/PET_MASTER_PORT naming node 0), and nothing else of torchrun's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import MIRROR, REPO
from tests.trainer.conftest import RUN_LIMIT, kill_tree, trainer_env, unused_port
from trainops.model import Target
from trainops.render.engine import Renderer, RenderOptions


def _runtime_node_container() -> dict:
    renderer = Renderer(RenderOptions(mirror=MIRROR))
    [result] = renderer.render([Target("kustomization", str(REPO / "overlays/prod-b200"))])
    [runtime] = [
        d.obj
        for d in result.documents
        if d.kind == "ClusterTrainingRuntime" and d.name == "torch-distributed-ib"
    ]
    [node] = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return node["template"]["spec"]["template"]["spec"]["containers"][0]


def test_two_nodes_train_with_the_torch_plugins_variables_alone(tmp_path: Path):
    container = _runtime_node_container()
    # The cluster owns the launcher; the program (a TrainJob's trainer.args) follows it.
    assert container["command"] == ["trainer-launch"]
    assert container["args"][:2] == ["--module", "trainer"]
    command = [*container["command"], *container["args"][:2]]
    # The runtime leaves every PET_* variable to the plugin (a TrainJob may not set them).
    assert not [e for e in container.get("env", []) if e["name"].startswith("PET_")]
    port = unused_port()
    checkpoints = tmp_path / "checkpoints"
    args = ["--model", "mlp", "--dataset", "synthetic", "--max-steps", "6"]
    args += ["--checkpoint-dir", str(checkpoints), "--checkpoint-interval", "3"]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    processes = []
    for node_rank in (0, 1):
        env = trainer_env(
            PATH=path,
            PET_NNODES="2",
            PET_NPROC_PER_NODE="1",
            PET_NODE_RANK=str(node_rank),
            PET_MASTER_ADDR="127.0.0.1",
            PET_MASTER_PORT=str(port),
        )
        processes.append(
            subprocess.Popen(
                [*command, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    try:
        # The bound only turns a rendezvous that never completes into a failure.
        outputs = [process.communicate(timeout=RUN_LIMIT) for process in processes]
    finally:
        for process in processes:
            kill_tree(process)
    assert [p.returncode for p in processes] == [0, 0], (
        outputs[0][1][-2000:] + outputs[1][1][-2000:]
    )
    records = [json.loads(line) for line in outputs[0][0].splitlines() if line.startswith("{")]
    [start] = [r for r in records if r["event"] == "start"]
    assert (start["launcher"], start["world_size"]) == ("torchrun", 2)
    assert (checkpoints / "step-6" / ".metadata").is_file()
