"""Planning a run before reserving GPUs: `estimate` (compute, fabric load, checkpoints,
ETTR), `failures` (interruption rates from published fleet data, with their sources)
and `spares` (the spare nodes a run needs to hold its ETTR while nodes are repaired)."""
