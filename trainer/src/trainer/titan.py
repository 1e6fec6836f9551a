"""torchtitan's metrics on the platform's Prometheus endpoint: an override of
torchtitan's metrics processor, activated with

    python -m torchtitan.train ... --override.imports trainer.titan.prometheus_metrics

(the torchtitan template passes it; docs/torchtitan.md). torchtitan's override
mechanism (`torchtitan.config.override`, 0.3.0) swaps the job's `MetricsProcessor.Config`
for this module's before anything is built; the processor then logs through
`trainer.titan_gauges.TitanGauges`, around whichever loggers torchtitan chose.
Importing this module needs torchtitan: only the torchtitan image has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchtitan.components.metrics import MetricsProcessor
from torchtitan.config.override import derive, override

from trainer import titan_gauges


class PrometheusMetricsProcessor(MetricsProcessor):
    """torchtitan's metrics processor whose logger also sets the node's gauges."""

    @dataclass(kw_only=True, slots=True)
    class Config(MetricsProcessor.Config):
        pass

    def _build_metric_logger(self, *, config_dict: dict[str, Any] | None = None, **kwargs):
        inner = super()._build_metric_logger(config_dict=config_dict, **kwargs)
        return titan_gauges.from_env(inner, config_dict)


@override(
    target=MetricsProcessor.Config,
    exact=True,
    description="trainops: step metrics on TRAINER_METRICS_PORT (trainer_* gauges)",
)
def prometheus_metrics(config: MetricsProcessor.Config) -> PrometheusMetricsProcessor.Config:
    return derive(config, PrometheusMetricsProcessor.Config)
