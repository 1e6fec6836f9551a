"""`trainops doctor`: read what NCCL and PyTorch logged and say what is wrong.

logs (files, directories, stdin, or a job's pods) -> per-process evidence (nccl_log)
-> per-rank records and cross-rank findings (analysis) -> text or JSON (report).
"""
