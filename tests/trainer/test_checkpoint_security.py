"""Checkpoints are data, never code: planted pickles in `.metadata` or in a shard's
non-tensor values never run, on resume (two real ranks) or in `trainer.inspect`,
and metadata cannot point a reader outside its checkpoint."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.trainer.conftest import BASE_ARGS, launch, trainer_env
from trainer import safe_dcp
from trainer.checkpoint import MANIFEST, file_sizes, read_manifest, write_manifest
from trainer.config import JobIdentity


class RunsCode:
    """Unpickling this runs `touch MARKER`: the payload of a planted checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def publish(directory: Path, step: int) -> Path:
    """Give a hand-made checkpoint directory a manifest that verifies, as an attacker can."""
    write_manifest(directory, step, 2, JobIdentity(), "planted")
    target = directory.with_name(f"step-{step}")
    directory.rename(target)
    return target


def plant_metadata(checkpoints: Path, marker: Path) -> Path:
    """step-35: a copy of step-30 whose `.metadata` runs code when unpickled."""
    planted = checkpoints / "planting"
    shutil.copytree(checkpoints / "step-30", planted)
    (planted / MANIFEST).unlink()
    (planted / ".metadata").write_bytes(pickle.dumps(RunsCode(marker)))
    return publish(planted, 35)


def plant_value(checkpoints: Path, marker: Path) -> Path:
    """step-35: a DCP checkpoint saved by DCP itself, whose progress counter is a payload."""
    source = checkpoints / "step-30"
    state = safe_dcp.load_offline(source, file_sizes(read_manifest(source)))
    state["progress"]["launches"] = RunsCode(marker)
    planted = checkpoints / "planting"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=planted, no_dist=True)
    return publish(planted, 35)


def run_inspect(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer.inspect", str(directory), "--no-params"],
        capture_output=True,
        text=True,
        env=trainer_env(),
        check=False,
    )


@pytest.mark.parametrize("plant", [plant_metadata, plant_value], ids=["metadata", "shard-value"])
def test_a_planted_payload_never_runs_on_inspect_or_resume(baseline_copy, tmp_path, plant):
    marker = tmp_path / "payload-ran"
    planted = plant(baseline_copy, marker)
    # The attacker's checkpoint is complete and verifies: only reading it can tell.
    assert read_manifest(planted)["step"] == 35

    inspected = run_inspect(baseline_copy)
    assert inspected.returncode == 0, inspected.stderr
    assert not marker.exists()
    assert '"step": 30' in inspected.stdout and "step-35" in inspected.stdout

    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(baseline_copy))
    assert not marker.exists()
    assert resumed.code == 0, resumed.stderr
    assert "checkpoint step-35 is unusable" in resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == 30
    assert (baseline_copy / "step-35.corrupt").is_dir()
    assert not (baseline_copy / "step-35").exists()


def test_what_dcp_writes_passes_the_allow_list(baseline):
    step = baseline[0] / "step-30"
    files = file_sizes(read_manifest(step))
    keys = set(safe_dcp.read_metadata(step, files).state_dict_metadata)
    assert {"progress.step", "optim.param_groups.0.lr", "rng_rank0", "rng_rank1"} <= keys
    state = safe_dcp.load_offline(step, files)
    assert state["progress"]["step"] == 30
    assert isinstance(state["optim"]["param_groups"][0]["betas"], tuple)


FORBIDDEN = [
    ("builtins", "eval"),
    ("builtins", "getattr"),
    ("os", "system"),
    ("torch", "load"),
    ("torch", "Tensor"),
    ("torch.distributed.checkpoint.metadata", "torch"),
    ("torch.distributed.checkpoint.filesystem", "FileSystemReader"),
    ("torch.serialization", "load"),
    ("pathlib", "Path"),
    ("collections", "OrderedDict"),
]


@pytest.mark.parametrize(("module", "name"), FORBIDDEN, ids=[".".join(g) for g in FORBIDDEN])
def test_no_global_outside_dcps_metadata_classes(tmp_path, module, name):
    # A protocol-2 GLOBAL opcode, then STOP: the unpickler must refuse before looking it up.
    data = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"."
    (tmp_path / ".metadata").write_bytes(data)
    with pytest.raises(safe_dcp.UnsafeCheckpoint, match=f"{module}.{name}"):
        safe_dcp.read_metadata(tmp_path, {".metadata": len(data)})


def _metadata_variant(baseline: Path, tmp_path: Path, change) -> tuple[Path, dict]:
    """A copy of step-30 whose metadata, pickled by us (trusted), has one field changed."""
    step = tmp_path / "step"
    shutil.copytree(baseline / "step-30", step)
    files = file_sizes(read_manifest(step))
    metadata = safe_dcp.read_metadata(step, files)
    change(metadata)
    data = pickle.dumps(metadata)
    (step / ".metadata").write_bytes(data)
    return step, {**files, ".metadata": len(data)}


def _first_storage(metadata, **fields):
    index, info = next(iter(metadata.storage_data.items()))
    metadata.storage_data[index] = replace(info, **fields)


METADATA_ATTACKS = {
    "a file outside the checkpoint": (
        lambda md: _first_storage(md, relative_path="../step-25/__0_0.distcp"),
        "a file the manifest does not list",
    ),
    "an absolute path": (
        lambda md: _first_storage(md, relative_path="/etc/passwd"),
        "a file the manifest does not list",
    ),
    "the metadata itself": (
        lambda md: _first_storage(md, relative_path=".metadata"),
        "a file the manifest does not list",
    ),
    "bytes past the end of the file": (
        lambda md: _first_storage(md, offset=1 << 40),
        "past the end of its file",
    ),
    "a decompression transform": (
        lambda md: _first_storage(md, transform_descriptors=["stream.zstd/1"]),
        "stream transforms",
    ),
    "a tensor larger than the shards": (
        lambda md: setattr(
            next(
                entry
                for entry in md.state_dict_metadata.values()
                if hasattr(entry, "chunks") and len(entry.size) == 2
            ),
            "size",
            torch.Size([1 << 30, 1 << 10]),
        ),
        "cannot fit in shards",
    ),
    "something else than metadata": (
        lambda md: setattr(md, "storage_data", ["not", "a", "mapping"]),
        "storage_data is not a mapping",
    ),
}


@pytest.mark.parametrize("attack", METADATA_ATTACKS.values(), ids=METADATA_ATTACKS.keys())
def test_metadata_cannot_point_outside_its_checkpoint(baseline, tmp_path, attack):
    change, message = attack
    step, files = _metadata_variant(baseline[0], tmp_path, change)
    with pytest.raises(safe_dcp.UnsafeCheckpoint, match=message):
        safe_dcp.read_metadata(step, files)


def test_rank_local_metadata_is_never_read(baseline, tmp_path):
    # DCP falls back to `__R.metadata` when `.metadata` fails; the trainer never writes one.
    step = tmp_path / "step"
    shutil.copytree(baseline[0] / "step-30", step)
    files = file_sizes(read_manifest(step))
    (step / "__0.metadata").write_bytes(pickle.dumps(RunsCode(tmp_path / "ran")))
    (step / ".metadata").write_bytes(b"\x80\x02N.")  # None: not metadata
    files[".metadata"] = 4
    state = {"progress.step": None}
    with pytest.raises(BaseException, match="not DCP metadata"):
        safe_dcp.load(state, step, files, process_group=None)
    assert not (tmp_path / "ran").exists()
