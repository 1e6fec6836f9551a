"""How many spare nodes keep a run at its ETTR target while failed nodes are repaired.

A failure that takes a node out of service (a GPU, a host, its link) leaves the job one
node short until the node is repaired. With a spare, the job restarts at once on the
spare; without, it waits for the repair. Failed nodes come back after the repair time,
so the number out of service at a moment is Poisson-distributed with mean
node failures per hour x repair hours (Little's law). With s spares the job has all its
nodes whenever at most s are out, so

    ETTR with s spares = ETTR of the run x P(Poisson(mean) <= s)

and the spares needed are the smallest s that reach the target; when the run's own
ETTR (checkpoints, lost work, restarts) is below the target, no number of spares can.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_SPARES = 10_000


@dataclass(frozen=True)
class Spares:
    nodes_out_mean: float  # nodes out of service at a moment, on average
    needed: int | None  # None: the target is out of reach whatever the spares
    ettr: float  # with `needed` spares (or with as many as it takes to approach the cap)


def poisson_cdf(k: int, mean: float) -> float:
    term = math.exp(-mean)
    total = term
    for i in range(1, k + 1):
        term *= mean / i
        total += term
    return min(total, 1.0)


def spares_needed(
    node_failures_per_hour: float, repair_hours: float, run_ettr: float, target: float
) -> Spares:
    mean = node_failures_per_hour * repair_hours
    if run_ettr < target:
        return Spares(mean, None, run_ettr)
    for spares in range(MAX_SPARES + 1):
        ettr = run_ettr * poisson_cdf(spares, mean)
        if ettr >= target:
            return Spares(mean, spares, ettr)
    return Spares(mean, None, run_ettr)


def ettr_with(
    spares: int, node_failures_per_hour: float, repair_hours: float, run_ettr: float
) -> float:
    return run_ettr * poisson_cdf(spares, node_failures_per_hour * repair_hours)
