"""This rank's batches of the sample stream, assembled ahead on a background thread.

The loader adds no order of its own: a batch is a pure function of its stream position
(`data.SampleOrder`, `data.rank_share`), and the training loop asks for a position.
While the loop trains on one batch, a thread assembles the next `depth` ones (reading
and stacking the samples, pinning them for the copy to the GPU). When the loop asks for
another position than the one ahead (a resume, a rollback that skips a batch), the
batches ahead are dropped and assembly restarts there, so exactly-once holds whatever
the depth.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np
import torch

from trainer.data import SampleOrder, rank_share
from trainer.plugins import Dataset


@dataclass(frozen=True)
class Batch:
    position: int  # first stream position of the step's global batch
    ids: np.ndarray  # this rank's dataset indices
    inputs: torch.Tensor
    targets: torch.Tensor


class BatchLoader:
    def __init__(
        self,
        dataset: Dataset,
        order: SampleOrder,
        rank: int,
        world_size: int,
        global_batch: int,
        depth: int,
        pin_memory: bool = False,
    ):
        self.dataset, self.order = dataset, order
        self.rank, self.world_size, self.global_batch = rank, world_size, global_batch
        self.depth, self.pin_memory = depth, pin_memory
        self._ahead: int | None = None  # position of the next batch the thread delivers
        self._queue: queue.Queue | None = None
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def assemble(self, position: int) -> Batch:
        ids = rank_share(self.order.take(position, self.global_batch), self.rank, self.world_size)
        inputs, targets = self.dataset.batch(ids)
        if self.pin_memory:
            inputs, targets = inputs.pin_memory(), targets.pin_memory()
        return Batch(position, ids, inputs, targets)

    def get(self, position: int) -> Batch:
        """The batch of the global batch starting at stream `position`."""
        if self.depth == 0:
            return self.assemble(position)
        if self._ahead != position:
            self._restart(position)
        item = self._queue.get()
        if isinstance(item, BaseException):
            self._ahead = None  # the thread has ended; a retry starts a new one
            raise item
        self._ahead = position + self.global_batch
        return item

    def close(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        # Unblocks a put into a full queue; the thread then sees the stop and ends.
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()
        self._thread = None
        self._ahead = None

    def _restart(self, position: int) -> None:
        self.close()
        self._queue = queue.Queue(maxsize=self.depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._produce,
            args=(position, self._queue, self._stop),
            name="batch-prefetch",
            daemon=True,
        )
        self._thread.start()
        self._ahead = position

    def _produce(self, position: int, out: queue.Queue, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                out.put(self.assemble(position))
                position += self.global_batch
        except Exception as error:  # the training thread raises it as its own
            out.put(error)
