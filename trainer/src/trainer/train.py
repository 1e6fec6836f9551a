"""The training loop: a thin composition of the trainer's components.

Data order (`data`) and its prefetching (`loader`), model (`models`, or a plug-in's:
`plugins`), the memory estimate (`memory`), parallelism, precision and the optimizer
(`parallel`), checkpoints (`checkpoint`), the NaN guard
(`guard`), the hang watchdog (`watchdog`), SIGTERM handling (`termination`), fault
injection (`faults`), metrics (`metrics`) and the NCCL transport check (`transport`)
each own one concern and their own config; this module wires them together and owns
the job's progress counters.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, fields

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from trainer import distributed, parallel, plugins, startup, transport
from trainer.checkpoint import (
    CHECKPOINT_ERRORS,
    Checkpointer,
    UnusableCheckpoints,
    describe_failure,
    newest_checkpoint,
    params_sha256,
)
from trainer.config import OptimConfig, TrainConfig
from trainer.data import SampleOrder, load_dataset
from trainer.errors import DivergedError, ExitCode, TrainerError, report_error
from trainer.failures import NCCL_FAULT, PEER_LOST, classify_exception
from trainer.faults import FaultInjector
from trainer.guard import NonFiniteGuard, Verdict
from trainer.hangreport import HangReport
from trainer.loader import BatchLoader
from trainer.memory import estimate_memory
from trainer.metrics import DeviceClock, Identity, Metrics, node_times, peak_flops_for
from trainer.models import build_model, loss_fn
from trainer.pretrained import load_weights
from trainer.termination import TerminationHandler
from trainer.watchdog import Watchdog

log = logging.getLogger("trainer")


@dataclass
class Progress:
    """What the job has done so far; saved in every checkpoint."""

    step: int = 0
    consumed_samples: int = 0  # positions of the sample stream used by the whole job
    epoch: int = 0
    world_size: int = 1
    job_start_time: float = 0.0  # wall clock of the job's first launch
    productive_seconds: float = 0.0  # step time of every step the job kept
    launches: int = 1
    dataset_size: int = 0
    seed: int = 0


def lr_multiplier(config: OptimConfig, world_size: int) -> float:
    if config.lr_scaling == "linear":
        return float(world_size)
    if config.lr_scaling == "sqrt":
        return math.sqrt(world_size)
    return 1.0


def adamw(param_groups: list[dict], config: OptimConfig) -> torch.optim.Optimizer:
    """The built-in optimizer, with a plug-in optimizer's signature (`trainer.plugins`)."""
    return parallel.adamw(param_groups)


def lr_at(step: int, peak: float, config: OptimConfig, max_steps: int) -> float:
    """Learning rate of `step` (1-based): linear warm-up, then constant or cosine to 10%."""
    if config.warmup_steps and step <= config.warmup_steps:
        return peak * step / config.warmup_steps
    if config.schedule == "constant":
        return peak
    span = max(1, max_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


class Trainer:
    def __init__(self, config: TrainConfig):
        self.config = config
        self.state_lock = threading.RLock()
        self._exit_lock = threading.Lock()
        self.ckpt: Checkpointer | None = None
        self.watchdog = Watchdog(config.watchdog.timeout)
        self.metrics: Metrics | None = None
        self._samples_file = None

    # -- setup ----------------------------------------------------------------------

    def setup(self) -> None:
        config = self.config
        nccl_log = transport.prepare(os.environ) if config.transport.expect else None
        # Bad data is the same on every rank: find it before the process group forms. A
        # rank leaving while its peers still connect fails their connect instead, and rank
        # 0's one-line error was never printed.
        plugin_dataset = plugins.is_import_path(config.data.dataset)
        dataset = None if plugin_dataset else load_dataset(config.data, config.model.name)
        # So is a batch the world size cannot split, which the launcher's variables tell.
        self.accumulation = parallel.accumulation_steps(
            config.parallel, config.data.batch_size, distributed.detect().world_size
        )
        self.topo = topo = distributed.initialize(
            config.device, config.collective_timeout, config.checkpoint.directory
        )
        _configure_logging(topo.rank)
        self.device = torch.device(topo.device)
        self.rank, self.world = topo.rank, topo.world_size

        if dataset is None:  # a plug-in may use the process group
            dataset = plugins.resolve("dataset", config.data.dataset)(config.data)
        self.dataset = dataset
        self.order = SampleOrder(len(self.dataset), config.seed)
        self.global_batch = config.data.batch_size * self.world * self.accumulation
        self.loader = BatchLoader(
            self.dataset,
            self.order,
            self.rank,
            self.world,
            self.global_batch,
            config.data.prefetch,
            pin_memory=self.device.type == "cuda",
        )

        def load_pretrained(model: torch.nn.Module) -> None:
            if config.model.weights is not None:
                load_weights(model, config.model.weights)

        self.parallel = parallel.build(
            lambda: plugins.choose("model", config.model.name, build_model)(
                config.model, self.dataset.spec
            ),
            config.parallel,
            topo,
            self.device,
            config.seed,
            initialize=load_pretrained,
        )
        self.model = self.parallel.model
        self.loss_fn = plugins.choose("loss", config.loss, loss_fn)
        sample = self.dataset.batch(self.order.take(0, 1))[0].to(self.device)
        self.flops_per_sample = self.parallel.flops_per_sample(sample)
        self.memory = estimate_memory(
            self.parallel.module, config.optim.name, config.parallel.parallelism, self.world
        )
        log.info("training state: %s", self.memory.describe())
        self.peak_lr = config.optim.lr * lr_multiplier(config.optim, self.world)
        self.optimizer = plugins.choose("optimizer", config.optim.name, adamw)(
            parallel.param_groups(self.model, config.optim, self.peak_lr), config.optim
        )
        # SIGTERM under FSDP2: set on the signal; the ranks agree on it at each step's end.
        self._stop_requested = threading.Event()

        # Rank 0's clock names this launch and, on a first launch, starts the job.
        shared = [(time.time_ns(), time.time())]
        dist.broadcast_object_list(shared, src=0)
        self.launch_tag = str(shared[0][0])
        self.progress = Progress(
            world_size=self.world,
            job_start_time=shared[0][1],
            dataset_size=len(self.dataset),
            seed=config.seed,
        )
        self.resumed_from = None
        if config.checkpoint.directory is not None:
            self.ckpt = Checkpointer(config.checkpoint, self.rank, self.world, self.launch_tag)
            self.ckpt.run_config = config.resolved
            self.ckpt.on_saved = self._on_checkpoint_saved
            self.ckpt.on_failed = self._on_checkpoint_failed
            self.ckpt.claim()
            if config.checkpoint.resume:
                self.resumed_from = self._restore()

        transport_kind = "gloo" if topo.backend == "gloo" else "unchecked"
        if nccl_log is not None:
            transport_kind = transport.confirm(nccl_log, config.transport, topo) or transport_kind

        self.guard = NonFiniteGuard(config.guard)
        marker_dir = config.checkpoint.directory
        self.faults = FaultInjector(
            config.faults, self.rank, marker_dir, expire_watchdog=self.watchdog.expire
        )
        if self.ckpt is not None:
            self.ckpt.writer_for = self.faults.checkpoint_writer
        peak = config.metrics.peak_flops
        if peak is None and self.device.type == "cuda":
            peak = peak_flops_for(torch.cuda.get_device_name(self.device))
        self.peak_flops = peak
        self.identity = Identity.from_env(
            self.rank, topo.local_rank, os.environ, config.checkpoint.directory
        )
        self.metrics = Metrics(config.metrics, self.identity)
        self.clock = DeviceClock(self.device.type == "cuda")
        self.metrics.info("nccl_transport", transport_kind)
        if config.record_samples is not None:
            config.record_samples.mkdir(parents=True, exist_ok=True)
            path = config.record_samples / f"samples.rank{self.rank}.jsonl"
            self._samples_file = path.open("a", buffering=1)

    def _state(self) -> dict:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {
            "model": model_state,
            "optim": optim_state,
            "progress": asdict(self.progress),
            "schedule": {
                "lr": self.config.optim.lr,
                "peak_lr": self.peak_lr,
                "scaling": self.config.optim.lr_scaling,
                "schedule": self.config.optim.schedule,
                "warmup_steps": self.config.optim.warmup_steps,
                "max_steps": self.config.max_steps,
            },
            f"rng_rank{self.rank}": torch.get_rng_state(),
        }

    def _restore(self) -> int | None:
        rng_key = f"rng_rank{self.rank}"

        def template(keys: set[str]) -> dict:
            state = self._state()
            if rng_key not in keys:
                del state[rng_key]
            return state

        with self.state_lock:
            found = self.ckpt.restore(template)
            if found is None:
                log.info(
                    "no checkpoint in %s yet: starting at step 0",
                    self.config.checkpoint.directory,
                )
                return None
            step, state = found
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optim"],
            )
            if rng_key in state:
                torch.set_rng_state(state[rng_key])
            known = {f.name for f in fields(Progress)}
            saved = Progress(**{k: v for k, v in state["progress"].items() if k in known})
            self._adopt(saved)
        log.info(
            "resumed from step-%d (epoch %d, %d samples consumed, saved at world size %d, now %d)",
            step,
            saved.epoch,
            saved.consumed_samples,
            saved.world_size,
            self.world,
        )
        return step

    def _adopt(self, saved: Progress) -> None:
        if saved.dataset_size != len(self.dataset) or saved.seed != self.config.seed:
            log.warning(
                "the checkpoint was trained on %d samples with seed %d, this launch has "
                "%d with seed %d: the sample order differs from the saved one",
                saved.dataset_size,
                saved.seed,
                len(self.dataset),
                self.config.seed,
            )
        if saved.world_size != self.world:
            log.warning(
                "world size changed from %d to %d: global batch %d samples "
                "(%d micro-batches of %d per rank), peak learning rate %g (%s scaling)",
                saved.world_size,
                self.world,
                self.global_batch,
                self.accumulation,
                self.config.data.batch_size,
                self.peak_lr,
                self.config.optim.lr_scaling,
            )
        # In place: the training loop holds a reference to this object.
        progress = self.progress
        progress.step = saved.step
        progress.consumed_samples = saved.consumed_samples
        progress.epoch = saved.epoch
        progress.job_start_time = saved.job_start_time
        progress.productive_seconds = saved.productive_seconds
        progress.launches = saved.launches + 1

    # -- the loop ---------------------------------------------------------------------

    def train(self) -> ExitCode:
        config, progress = self.config, self.progress
        TerminationHandler(self._on_sigterm).install()
        self.watchdog.start(HangReport.from_env(self.rank))
        self.metrics.emit(
            "start",
            step=progress.step,
            resumed_from=self.resumed_from,
            world_size=self.world,
            launcher=self.topo.launcher,
            warm_start=startup.STARTED_WARM,
            backend=self.topo.backend,
            device=str(self.device),
            model=config.model.name,
            params=sum(p.numel() for p in self.model.parameters()),
            flops_per_sample=self.flops_per_sample,
            global_batch=self.global_batch,
            accumulation_steps=self.accumulation,
            parallelism=config.parallel.parallelism,
            mesh=self.parallel.mesh_shape,
            precision=config.parallel.precision,
            activation_checkpointing=config.parallel.activation_checkpointing,
            peak_lr=self.peak_lr,
            dataset_size=len(self.dataset),
            launches=progress.launches,
            restarts=progress.launches - 1,
            max_steps=config.max_steps,
            node_rank=self.identity.node_rank,
            checkpoint_interval_steps=config.checkpoint.interval if self.ckpt else None,
            memory_estimate_bytes=self.memory.total,
        )
        # Nothing is at risk yet: the state was just loaded, or is the initial one.
        self.metrics.update(last_checkpoint_timestamp_seconds=time.time())
        window = self._new_window()
        window_started = time.perf_counter()
        while progress.step < config.max_steps:
            step = progress.step + 1
            self.watchdog.beat(step)
            started = time.perf_counter()
            batch = self.loader.get(progress.consumed_samples)
            ids = batch.ids
            inputs = batch.inputs.to(self.device, non_blocking=True)
            targets = batch.targets.to(self.device, non_blocking=True)
            window["data"] += time.perf_counter() - started
            poison = self.faults.during_step(step)
            self.optimizer.zero_grad(set_to_none=True)
            # This rank's own work: everything before its first forward pass, then its
            # forward passes on the device; no peer is waited for until the backward pass.
            own = time.perf_counter() - started
            forward = 0.0
            loss_sum = torch.zeros((), device=self.device)
            size = config.data.batch_size
            for index in range(self.accumulation):
                last = index == self.accumulation - 1
                micro = slice(index * size, (index + 1) * size)
                with self.parallel.micro_batch(last):
                    forward_start = self.clock.mark()
                    with self.parallel.autocast():
                        logits = self.model(inputs[micro])
                    loss = self.loss_fn(logits.float(), targets[micro]) / self.accumulation
                    forward_end = self.clock.mark()
                    if poison:
                        loss = loss * float("nan")
                    with self.watchdog.collective("gradient all-reduce"):
                        if last:
                            self.faults.in_gradient_all_reduce(step)
                        loss.backward()
                forward += self.clock.seconds(forward_start, forward_end)
                loss_sum += loss.detach()
            max_norm = config.optim.grad_clip or math.inf
            grad_norm = parallel.clip_gradients(self.model.parameters(), max_norm)
            stopping = self.parallel.sharded and self._agree_to_stop()
            loss_value = float(loss_sum)  # waits for the device
            window["work"] += own + forward
            verdict = self.guard.judge(step, grad_norm, loss_value)
            if verdict is Verdict.ROLLBACK:
                self._rollback(step)
                continue
            with self.state_lock:
                lr = lr_at(step, self.peak_lr, config.optim, config.max_steps)
                if verdict is Verdict.STEP:
                    for group in self.optimizer.param_groups:
                        group["lr"] = lr
                    self.optimizer.step()
                progress.step = step
                progress.consumed_samples += self.global_batch
                progress.epoch = self.order.epoch_of(progress.consumed_samples)
                elapsed = time.perf_counter() - started
                progress.productive_seconds += elapsed
            self._record_samples(step, ids)
            if stopping:
                self._save_shards_and_exit(step)
            self.metrics.step(step)
            window["steps"] += 1
            if verdict is Verdict.STEP:
                window["loss"] += loss_value
                window["applied"] += 1
            self.faults.after_step(step)
            if step % config.metrics.log_interval == 0 or step == config.max_steps:
                now = time.perf_counter()
                self._log_window(step, window, now - window_started, lr, grad_norm)
                window = self._new_window()
                window_started = now
            if self.ckpt is not None:
                if step % config.checkpoint.interval == 0 or step == config.max_steps:
                    with self.watchdog.collective("checkpoint save"):
                        self.ckpt.save(step, self._state())
                self.ckpt.poll()
        return self._finish()

    @staticmethod
    def _new_window() -> dict:
        return {"loss": 0.0, "applied": 0, "steps": 0, "data": 0.0, "work": 0.0}

    def _log_window(
        self, step: int, window: dict, seconds: float, lr: float, grad_norm: float
    ) -> None:
        steps = max(1, window["steps"])
        # One gather per window carries the loss and every rank's own times: each node
        # learns the job's median work time without a collective of its own.
        mine = torch.tensor(
            [
                window["loss"],
                float(window["applied"]),
                float(self.identity.node_rank),
                window["work"] / steps,
                window["data"] / steps,
            ],
            dtype=torch.float64,
            device=self.device,
        )
        rows = [torch.empty_like(mine) for _ in range(self.world)]
        with self.watchdog.collective("metrics all-gather"):
            dist.all_gather(rows, mine)
        table = torch.stack(rows).cpu()
        applied = table[:, 1].sum().item()
        loss = table[:, 0].sum().item() / applied if applied else None
        node = node_times(
            ((int(r[2]), r[3].item(), r[4].item()) for r in table), self.identity.node_rank
        )
        samples_per_second = self.global_batch * steps / seconds if seconds > 0 else 0.0
        mfu = None
        if self.peak_flops:
            mfu = self.flops_per_sample * samples_per_second / (self.peak_flops * self.world)
        ckpt = self.ckpt
        self.metrics.emit(
            "step",
            step=step,
            epoch=self.progress.epoch,
            loss=loss,
            step_seconds=seconds / steps,
            samples_per_second=samples_per_second,
            tokens_per_second=(
                samples_per_second * self.dataset.spec.tokens_per_sample
                if self.dataset.spec.tokens_per_sample
                else None
            ),
            mfu=mfu,
            lr=lr,
            grad_norm=grad_norm,
            checkpoint_save_seconds=ckpt.last_save_seconds if ckpt else None,
            checkpoint_blocking_seconds=ckpt.last_blocking_seconds if ckpt else None,
            failed_checkpoints=ckpt.failed_saves if ckpt else 0,
            ettr=self._ettr(),
            skipped_steps=self.guard.skipped_total,
            rollbacks=self.guard.rollbacks,
            consumed_samples=self.progress.consumed_samples,
            world_size=self.world,
            data_wait_seconds=node.data_wait_seconds,
            work_seconds=node.work_seconds,
            straggler_ratio=node.straggler_ratio,
            slowest_node=node.slowest_node,
            slowest_node_ratio=node.slowest_ratio,
        )

    def _ettr(self) -> float | None:
        """Seconds of kept steps over the wall time since the job first started."""
        wall = time.time() - self.progress.job_start_time
        return min(1.0, self.progress.productive_seconds / wall) if wall > 0 else None

    def _on_checkpoint_saved(self, step: int, seconds: float, blocking: float) -> None:
        self.metrics.record(
            "checkpoint",
            step=step,
            mode=self.config.checkpoint.mode,
            save_seconds=seconds,
            blocking_seconds=blocking,
        )
        self.metrics.update(
            checkpoint_save_seconds=seconds,
            checkpoint_blocking_seconds=blocking,
            last_checkpoint_timestamp_seconds=time.time(),
        )

    def _on_checkpoint_failed(self, step: int, reason: str) -> None:
        self.metrics.emit(
            "checkpoint_failed",
            step=step,
            reason=reason,
            failed_checkpoints=self.ckpt.failed_saves,
        )

    def _record_samples(self, step: int, ids) -> None:
        if self._samples_file is None:
            return
        self._samples_file.write(
            json.dumps(
                {
                    "launch": self.launch_tag,
                    "step": step,
                    "rank": self.rank,
                    "world_size": self.world,
                    "ids": [int(i) for i in ids],
                }
            )
            + "\n"
        )

    def _rollback(self, step: int) -> None:
        if self.ckpt is None:
            raise DivergedError(
                f"step {step}: non-finite gradients and no --checkpoint-dir to roll back to"
            )
        consumed = self.progress.consumed_samples + self.global_batch
        launches = self.progress.launches
        with self.watchdog.collective("checkpoint restore"):
            self.ckpt.wait()
            try:
                restored = self._restore()
            except UnusableCheckpoints:
                restored = None
        if restored is None:
            raise DivergedError(
                f"step {step}: non-finite gradients and no usable checkpoint to roll back to"
            )
        skipped = consumed - self.progress.consumed_samples
        log.warning(
            "rolled back from step %d to step %d; the %d samples since that "
            "checkpoint are skipped, not replayed",
            step,
            self.progress.step,
            skipped,
        )
        with self.state_lock:
            self.progress.consumed_samples = consumed
            self.progress.epoch = self.order.epoch_of(consumed)
            self.progress.launches = launches

    def _finish(self) -> ExitCode:
        self.loader.close()
        code = ExitCode.OK
        if self.ckpt is not None:
            self.ckpt.close()
            code = self._last_step_saved()
        self.watchdog.stop()
        memory = self._memory_per_rank()  # of training, before the gather below
        # The whole model on rank 0 (gathered from the shards under FSDP2): a collective.
        full = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        self.metrics.emit(
            "end",
            step=self.progress.step,
            params_sha256=params_sha256(full),
            state_bytes_per_rank=[int(row[0]) for row in memory],
            peak_memory_bytes_per_rank=[int(row[1]) for row in memory],
            epoch=self.progress.epoch,
            consumed_samples=self.progress.consumed_samples,
            ettr=self._ettr(),
            failed_checkpoints=self.ckpt.failed_saves if self.ckpt else 0,
        )
        self.metrics.close()
        if self._samples_file:
            self._samples_file.close()
        distributed.shutdown()
        return code

    def _last_step_saved(self) -> ExitCode:
        """OK when the last step is published; else UNSAVED, the same on every rank.

        A failed periodic save lets training go on (the next one may succeed); when even
        the last step's save failed (a full volume, a quota, a file-size limit), what
        was trained since the newest checkpoint exists nowhere, and exit 0 would say the
        job is done. Rank 0 publishes checkpoints, so it decides.
        """
        step = self.progress.step
        newest = newest_checkpoint(self.config.checkpoint.directory) if self.rank == 0 else None
        flag = torch.tensor([int(newest is not None and newest[0] == step)])
        dist.broadcast(flag, src=0, group=self.ckpt.group)
        if flag.item():
            return ExitCode.OK
        if self.rank == 0:
            retry = (
                f"a retry resumes from step-{newest[0]}"
                if newest is not None
                else "there is no checkpoint: a retry starts over"
            )
            log.error(
                "training ended at step %d, but no checkpoint of it could be written "
                "(%d failed saves): exiting %d; %s",
                step,
                self.ckpt.failed_saves,
                ExitCode.UNSAVED,
                retry,
            )
        return ExitCode.UNSAVED

    def _memory_per_rank(self) -> list[list[float]]:
        """Each rank's (bytes of parameters, gradients and optimizer state, peak memory)."""
        mine = torch.tensor(
            [
                parallel.local_state_bytes(self.model, self.optimizer),
                parallel.peak_memory_bytes(self.device),
            ],
            dtype=torch.float64,
            device=self.device,
        )
        rows = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine)
        return torch.stack(rows).tolist()

    # -- leaving in a hurry -----------------------------------------------------------

    def _on_sigterm(self) -> None:
        if not self.parallel_sharded or self.ckpt is None:
            self.emergency_exit(ExitCode.TERMINATED, "SIGTERM")
        # FSDP2: the training loop stops every rank after one same step and saves it
        # (`_save_shards_and_exit`). It does not get there when a peer is gone or hangs:
        # the collectives of the step never complete.
        self._stop_requested.set()
        self.faults.sigterm_handled.set()
        threading.Event().wait(STOP_SECONDS)
        self._exit_without_save(
            ExitCode.TERMINATED, "SIGTERM", f"no step ended in {STOP_SECONDS:.0f}s"
        )

    def _agree_to_stop(self) -> bool:
        """Whether any rank got SIGTERM: one all-reduce of a flag, at every step's end."""
        flag = torch.tensor([float(self._stop_requested.is_set())], device=self.device)
        with self.watchdog.collective("stop agreement"):
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _save_shards_and_exit(self, step: int) -> None:
        """Every rank writes its shards of `step`, the last step of every rank; exit 143."""
        if not self._exit_lock.acquire(blocking=False):
            threading.Event().wait()  # another thread is already leaving
        self.watchdog.stop()
        code = ExitCode.TERMINATED
        started = time.perf_counter()
        try:
            path = self.ckpt.save_and_publish(step, self._state())
        except CHECKPOINT_ERRORS as error:
            log.error("SIGTERM: the save of step %d failed: %s", step, describe_failure(error))
            self._rely_on_last_checkpoint(code, "SIGTERM", "the save failed")
            _hard_exit(code)
        log.warning(
            "SIGTERM: every rank saved its shards of %s in %.1fs; exiting with %d",
            path.name,
            time.perf_counter() - started,
            code,
        )
        _hard_exit(code)

    def emergency_exit(self, code: ExitCode, reason: str, peers_gone: str | None = None) -> None:
        """Save the last completed step if that needs no peer, then exit.

        DDP: rank 0 holds the whole state and saves it alone, without collectives
        (peers may be gone). FSDP2: each rank holds only its shards, and a save needs
        every peer: after a lost peer (`peers_gone`) nothing can be saved, and the last
        periodic checkpoint is what a resume gets.
        """
        if self.parallel_sharded and self.ckpt is not None:
            # gloo's and NCCL's first sentence names the peer; the rest is advice.
            evidence = (peers_gone or "a collective failed").split(". ")[0][:200]
            self._exit_without_save(code, reason, f"peers are gone: {evidence}")
        if not self._exit_lock.acquire(blocking=False):
            threading.Event().wait()  # another thread is already doing this
        self.watchdog.stop()
        self.watchdog.join_report(reason)
        # Wait for a step boundary: the optimizer step must not be half applied.
        consistent = self.state_lock.acquire(timeout=60)
        if hasattr(self, "faults"):
            self.faults.sigterm_handled.set()
        step = self.progress.step if hasattr(self, "progress") else 0
        try:
            if self.ckpt is not None and self.rank == 0 and consistent and step > 0:
                started = time.perf_counter()
                path = self.ckpt.emergency_save(step, self._state())
                log.warning(
                    "%s: saved %s without collectives in %.1fs; exiting with %d",
                    reason,
                    path.name,
                    time.perf_counter() - started,
                    code,
                )
            else:
                log.warning("%s at step %d: exiting with %d", reason, step, code)
        except CHECKPOINT_ERRORS as error:
            log.error(
                "%s: emergency checkpoint of step %d failed: %s",
                reason,
                step,
                describe_failure(error),
            )
        _hard_exit(code)

    @property
    def parallel_sharded(self) -> bool:
        return hasattr(self, "parallel") and self.parallel.sharded

    def _exit_without_save(self, code: ExitCode, reason: str, why: str) -> None:
        if not self._exit_lock.acquire(blocking=False):
            threading.Event().wait()  # another thread is already leaving
        self.watchdog.stop()
        self.watchdog.join_report(reason)
        self._rely_on_last_checkpoint(code, reason, why)
        _hard_exit(code)

    def _rely_on_last_checkpoint(self, code: ExitCode, reason: str, why: str) -> None:
        # A periodic save may still be in flight: it publishes, or fails for want of
        # the lost peer, before the log names what a resume will find.
        unsettled = self.ckpt.settle(SETTLE_SECONDS)
        newest = newest_checkpoint(self.config.checkpoint.directory)
        if newest is None:
            fallback = "there is no checkpoint yet: a resume starts at step 0"
        else:
            saved_step, created = newest
            fallback = (
                f"relying on step-{saved_step}, the last periodic checkpoint, saved "
                f"{max(0.0, time.time() - created):.1f}s ago"
            )
        if unsettled is not None:
            fallback += (
                f" (the save of step {unsettled} was still in flight after {SETTLE_SECONDS:.0f}s)"
            )
        log.error(
            "%s at step %d: no collective save (%s); %s; exiting with %d",
            reason,
            self.progress.step,
            why,
            fallback,
            code,
        )


# How long a rank leaving without a save waits for the periodic save in flight to
# publish or fail: well inside torchrun's 30 s between SIGTERM and SIGKILL.
SETTLE_SECONDS = 10.0

# How long a SIGTERM under FSDP2 waits for the ranks to end a step together and save it
# before concluding that a peer is gone or stuck: inside the templates' 240 s of
# torchrun shutdown timeout.
STOP_SECONDS = 180.0


def _configure_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"%(asctime)s trainer[rank {rank}] %(levelname)s %(message)s",
        stream=sys.stderr,
        force=True,
    )


def _hard_exit(code: int) -> None:
    """Leave without joining threads or tearing down a process group with dead peers.

    Also after a clean finish: Python's finalisation destroys the gloo groups that
    FSDP2's device mesh still references, and gloo can abort there (SIGABRT, "terminate
    called without an active exception") after the work is done and saved.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def _rank_or_unknown() -> int | str:
    try:
        return distributed.detect().rank
    except TrainerError:
        return "?"


def run(config: TrainConfig) -> int:
    trainer = Trainer(config)
    try:
        trainer.setup()
        code = trainer.train()
    except TrainerError as error:
        report_error(error)
        code = error.code
    except Exception as error:
        if trainer._exit_lock.locked():
            threading.Event().wait()  # SIGTERM handling owns the exit
        cause, evidence = classify_exception(error)
        # The state at the last step boundary is intact when only the collective failed:
        # save it without collectives. After a GPU fault the device may not even read.
        if cause in (PEER_LOST, NCCL_FAULT) and hasattr(trainer, "progress"):
            log.error("a collective failed (%s): %s", cause.title, evidence)
            trainer.emergency_exit(
                ExitCode(cause.code), cause.id.replace("-", " "), peers_gone=evidence
            )
        trainer.watchdog.join_report("an error")
        if cause is PEER_LOST and not hasattr(trainer, "progress"):
            # A peer left while the ranks were still connecting (logging is not set up
            # yet): its own message says why, and a traceback here would read like the
            # cause.
            first = evidence.split(". ")[0][:300]
            print(
                f"trainer[rank {_rank_or_unknown()}] another rank went away before training "
                f"began ({first}): exiting {cause.code}",
                file=sys.stderr,
                flush=True,
            )
        else:
            traceback.print_exc()
        code = cause.code
    _hard_exit(code)
    return int(code)  # not reached
