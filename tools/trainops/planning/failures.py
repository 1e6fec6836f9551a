"""How often a training job is interrupted, from published fleet data, class by class.

Each model is one published record of a real training run, turned into rates per
1000 GPU-hours (interruptions / (GPUs x hours) x 1000). Every class says what it
counts and whether the node it hit must be taken out of service (a failed GPU or host
needs a replacement node before the job can run at full size again; a software bug
or a timeout does not).

- `llama3` (the default): Llama Team, AI @ Meta, "The Llama 3 Herd of Models",
  arXiv:2407.21783 (2024), section 3.3.4 and Table 5. A 54-day snapshot of the 405B
  pre-training on 16,384 H100 GPUs had 466 job interruptions: 47 planned (automated
  maintenance) and 419 unexpected, categorised in Table 5. 16,384 GPUs x 54 days x 24 h
  = 21,233,664 GPU-hours, so one interruption per 45,566 GPU-hours in all.
- `opt175b`: the OPT-175B run (Zhang et al., "OPT: Open Pre-trained Transformer Language
  Models", arXiv:2205.01068, 2022, and its published logbook) on 992 A100 GPUs, whose job
  mean time to interrupt was about 7.5 hours as compiled by G. Lockwood
  (glennklockwood.com/garden/job-reliability): an older fleet run with less automation,
  about six times less reliable than Llama 3's. Not broken down by class; counted as
  node failures, the cautious reading for spares.

A profile's `failureRates` (and `trainops plan --failure-rate`) replace a class's rate
with the fleet's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

LLAMA3_GPU_HOURS = 16_384 * 54 * 24
OPT175B_MTTI_HOURS = 7.5
OPT175B_GPUS = 992


@dataclass(frozen=True)
class FailureClass:
    name: str
    rate: float  # interruptions per 1000 GPU-hours
    replaces_node: bool  # the node is out of service until repaired
    counts: str  # what the published record counts in this class


@dataclass(frozen=True)
class FailureModel:
    name: str
    source: str
    classes: tuple[FailureClass, ...]

    @property
    def rate(self) -> float:
        return sum(c.rate for c in self.classes)

    @property
    def node_rate(self) -> float:
        """Interruptions per 1000 GPU-hours that take a node out of service."""
        return sum(c.rate for c in self.classes if c.replaces_node)

    def with_rates(self, rates: dict[str, float]) -> FailureModel:
        """The model with some classes' rates replaced (ValueError for unknown names)."""
        known = {c.name for c in self.classes}
        unknown = sorted(set(rates) - known)
        if unknown:
            raise ValueError(
                f"no failure class {unknown[0]!r} in model {self.name} "
                f"(classes: {', '.join(sorted(known))})"
            )
        classes = tuple(
            replace(c, rate=rates[c.name], counts=f"{c.counts}; rate overridden")
            if c.name in rates
            else c
            for c in self.classes
        )
        return replace(self, classes=classes)


def _llama3(name: str, count: int, replaces_node: bool, counts: str) -> FailureClass:
    return FailureClass(name, count / LLAMA3_GPU_HOURS * 1000, replaces_node, counts)


LLAMA3 = FailureModel(
    "llama3",
    "Llama Team, AI @ Meta, The Llama 3 Herd of Models, arXiv:2407.21783 (2024), sec. 3.3.4 "
    "and Table 5: 466 interruptions (419 unexpected, 47 planned) in 54 days on 16,384 H100 GPUs",
    (
        _llama3(
            "gpu",
            268,
            True,
            "faulty GPU 148, GPU HBM3 memory 72, GPU SRAM memory 19, GPU system processor 17, "
            "silent data corruption 6, GPU thermal interface and sensor 6",
        ),
        _llama3("network", 35, True, "network switch or cable 35"),
        _llama3(
            "host",
            21,
            True,
            "NIC 7, SSD 3, power supply 3, server chassis 2, IO expansion board 2, CPU 2, "
            "system memory 2",
        ),
        _llama3("host-maintenance", 32, True, "unplanned host maintenance 32"),
        _llama3("software", 56, False, "software bug 54, dependency 2"),
        _llama3("unknown", 7, False, "NCCL watchdog timeouts 7"),
        _llama3("planned", 47, False, "planned interruptions (automated maintenance) 47"),
    ),
)
OPT175B = FailureModel(
    "opt175b",
    "Zhang et al., OPT: Open Pre-trained Transformer Language Models, arXiv:2205.01068 (2022) "
    "and its logbook: job mean time to interrupt about 7.5 h on 992 A100 GPUs (as compiled at "
    "glennklockwood.com/garden/job-reliability)",
    (
        FailureClass(
            "interruption",
            1000 / (OPT175B_MTTI_HOURS * OPT175B_GPUS),
            True,
            "every interruption of the run",
        ),
    ),
)
MODELS = {model.name: model for model in (LLAMA3, OPT175B)}
