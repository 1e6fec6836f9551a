"""Exactly-once data order across restarts and world-size changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.trainer.conftest import inspect, launch
from trainer.data import SampleOrder, rank_share

SAMPLES = 96
PER_RANK = 4


def committed_stream(record_dir: Path) -> list[int]:
    """Sample ids of every step the job kept, in step order.

    A step recorded by several launches (it ran, the launch died before the step was
    checkpointed, the next launch ran it again) counts only in the latest launch.
    """
    by_step: dict[int, dict] = {}
    for path in record_dir.glob("samples.rank*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            launch_id = int(record["launch"])
            entry = by_step.setdefault(record["step"], {"launch": -1, "ranks": {}})
            if launch_id > entry["launch"]:
                entry.update(launch=launch_id, ranks={})
            if launch_id == entry["launch"]:
                entry["ranks"][record["rank"]] = record
    stream: list[int] = []
    for step in sorted(by_step):
        ranks = by_step[step]["ranks"]
        world = next(iter(ranks.values()))["world_size"]
        assert sorted(ranks) == list(range(world)), f"step {step}: missing ranks"
        # Undo the interleaved deal: rank r holds positions r, r + W, r + 2W, ...
        block = [None] * sum(len(r["ids"]) for r in ranks.values())
        for rank, record in ranks.items():
            block[rank::world] = record["ids"]
        stream.extend(block)
    return stream


def args(directory: Path, records: Path, max_steps: int, *extra: str) -> list[str]:
    return [
        "--model",
        "mlp",
        "--num-samples",
        str(SAMPLES),
        "--batch-size",
        str(PER_RANK),
        "--max-steps",
        str(max_steps),
        "--checkpoint-dir",
        str(directory),
        "--checkpoint-interval",
        "4",
        "--record-samples",
        str(records),
        *extra,
    ]


def test_resume_on_one_then_three_ranks_sees_every_sample_once(tmp_path):
    directory, records = tmp_path / "ckpt", tmp_path / "samples"
    # Two ranks (global batch 8); one dies at step 10, after the step-8 checkpoint.
    killed = launch(*args(directory, records, 12, "--inject-fault", "sigkill@10:rank=0"))
    assert killed.code >= 128, killed.stderr
    resumed_at = inspect(directory, "--no-params")["step"]
    two = launch(*args(directory, records, 12))
    assert two.code == 0, two.stderr
    # One rank (global batch 4) for 6 more steps, then three ranks (global batch 12).
    one = launch(*args(directory, records, 18), nproc=1)
    assert one.code == 0, one.stderr
    assert one.events("start")[0]["resumed_from"] == 12
    three = launch(*args(directory, records, 24), nproc=3)
    assert three.code == 0, three.stderr
    assert three.events("start")[0]["resumed_from"] == 18

    consumed = 12 * 8 + 6 * 4 + 6 * 12
    report = inspect(directory, "--no-params")
    assert report["consumed_samples"] == consumed
    assert report["world_size"] == 3
    assert report["epoch"] == consumed // SAMPLES

    stream = committed_stream(records)
    assert len(stream) == consumed
    first_epoch, second_epoch = stream[:SAMPLES], stream[SAMPLES:]
    assert sorted(first_epoch) == list(range(SAMPLES))  # every sample, exactly once
    assert len(set(second_epoch)) == len(second_epoch)  # no repeats within epoch 2
    # The relaunch really repeated uncommitted steps, and the filter dropped them.
    raw = sum(len(p.read_text().splitlines()) for p in records.glob("*.jsonl"))
    assert resumed_at is not None and resumed_at < 10 and raw > consumed // PER_RANK


def test_sample_order_is_a_function_of_seed_and_epoch():
    order = SampleOrder(10, seed=3)
    again = SampleOrder(10, seed=3)
    assert order.take(0, 25).tolist() == again.take(0, 25).tolist()
    assert sorted(order.take(0, 10)) == list(range(10))
    assert sorted(order.take(10, 10)) == list(range(10))
    assert order.take(0, 10).tolist() != order.take(10, 10).tolist()
    assert order.take(7, 6).tolist() == order.take(0, 13)[7:].tolist()
    assert SampleOrder(10, seed=4).take(0, 10).tolist() != order.take(0, 10).tolist()


def test_ranks_split_a_global_batch_without_overlap():
    block = np.arange(12)
    shares = [rank_share(block, rank, 3) for rank in range(3)]
    assert sorted(np.concatenate(shares).tolist()) == list(range(12))
    assert shares[1].tolist() == [1, 4, 7, 10]
