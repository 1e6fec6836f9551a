"""`trainops doctor`: read what NCCL, PyTorch, the GPU driver and nccl-tests left in the
logs and say what is wrong.

sources (files, directories, gzip, stdin, FIFOs, Flight Recorder JSON, or a job's pods)
-> lines cleaned of collection prefixes (lines) -> facts (nccl_messages, torch_messages,
node_messages, flight_recorder) as events with process, rank and attempt (parse)
-> one record per process and attempt (evidence) -> the checks (checks/*) per attempt
(analysis) -> text or JSON (report). nccl-tests output has its own reader (nccl_tests).
Everything on log text is bounded (limits).
"""
