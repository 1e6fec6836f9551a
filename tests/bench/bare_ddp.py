"""The peer of the trainer benchmark: a bare DDP loop, same model and data, no extras.

Run under torchrun; rank 0 prints one JSON line with the seconds per step after the
first `--warmup` steps.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trainer.config import DataConfig, ModelConfig
from trainer.data import SampleOrder, load_dataset, rank_share
from trainer.models import build_model, loss_fn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = load_dataset(DataConfig(batch_size=args.batch_size), "mlp")
    model = DistributedDataParallel(build_model(ModelConfig("mlp", args.width), data.spec))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    order = SampleOrder(len(data), 0)
    global_batch = args.batch_size * world
    started = None
    for step in range(args.steps):
        if step == args.warmup:
            started = time.perf_counter()
        ids = rank_share(order.take(step * global_batch, global_batch), rank, world)
        inputs, targets = data.batch(ids)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
    elapsed = time.perf_counter() - started
    if rank == 0:
        print(json.dumps({"step_seconds": elapsed / (args.steps - args.warmup)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
