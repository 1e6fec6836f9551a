"""The trainops trainer: a fault-tolerant DistributedDataParallel workload.

Launched by torchrun (PyTorchJob) or mpirun (MPIJob), it honours the contract the
job templates promise: rendezvous from the operator's environment, checkpoints on the
shared volume, an emergency save on SIGTERM, proof of the NCCL transport, metrics
for the PodMonitor, from every node. The same code runs on CPU with gloo.

This module stays free of torch imports so that `python -m trainer --help` is fast.
"""

__version__ = "0.1.0"
