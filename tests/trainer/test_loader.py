"""The prefetching loader delivers exactly the batches the sample order prescribes."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from trainer.data import DataSpec, SampleOrder, rank_share, synthetic_tokens
from trainer.loader import BatchLoader


def expected(data, order: SampleOrder, position: int, rank: int, world: int, batch: int):
    ids = rank_share(order.take(position, batch * world), rank, world)
    return ids, data.batch(ids)


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_batches_follow_the_stream_across_epochs_and_jumps(depth):
    data = synthetic_tokens(count=10, seq_len=4, vocab=30, seed=2)
    loader = BatchLoader(data, SampleOrder(len(data), seed=5), 1, 3, 6, depth)
    reference = SampleOrder(len(data), seed=5)
    # In order past two epoch ends, then a jump ahead (a rollback skips a batch) and back
    # (a resume from an earlier checkpoint).
    for position in (0, 6, 12, 18, 24, 36, 42, 6, 12):
        batch = loader.get(position)
        ids, (inputs, targets) = expected(data, reference, position, 1, 3, 2)
        assert batch.position == position
        assert batch.ids.tolist() == ids.tolist()
        assert torch.equal(batch.inputs, inputs) and torch.equal(batch.targets, targets)
    loader.close()
    assert not any(t.name == "batch-prefetch" for t in threading.enumerate())


class Failing:
    """A dataset whose third sample cannot be read."""

    spec = DataSpec("classify", (1,), num_classes=2)

    def __len__(self) -> int:
        return 8

    def batch(self, ids: np.ndarray):
        if 2 in ids.tolist():
            raise OSError("input/output error")
        return torch.zeros(len(ids), 1), torch.zeros(len(ids), dtype=torch.long)


def test_an_error_while_prefetching_is_raised_on_the_training_thread():
    order = SampleOrder(8, seed=0)
    bad = int(np.flatnonzero(order.permutation(0) == 2)[0])
    loader = BatchLoader(Failing(), order, 0, 1, 1, depth=2)
    for position in range(bad):
        loader.get(position)
    with pytest.raises(OSError, match="input/output error"):
        loader.get(bad)
    loader.close()
