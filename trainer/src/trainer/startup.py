"""How this process started: as a fresh interpreter, or as a worker forked warm from
trainer-launch's zygote (`warmstart`), which sets it before running the trainer. The loop
reports it in its start event; it lives apart so that the loop does not import the fork
server."""

STARTED_WARM = False
