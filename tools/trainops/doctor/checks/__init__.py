"""The doctor's checks, one module per failure area; importing this package registers them.

setup: what NCCL set up on each rank (world size, init, transport, GPUDirect, devices).
network: bootstrap and socket interfaces, the c10d store, rendezvous, Gloo.
rdma: verbs errors, memory registration, network plugins, GPUDirect.
node: GPUs and their node (Xid, ECC, CUDA, NVSwitch, shared memory, P2P, topology).
job: the program (timeouts, stragglers, mismatched collectives, killed ranks).
config: NCCL settings that override NCCL's own choices, versions across ranks.
catalog: any other message the message catalog knows (its meaning, fix and finding).
"""

from trainops.doctor.checks import catalog, config, job, network, node, rdma, setup  # noqa: F401
