"""Proof of the NCCL transport: which network NCCL chose and whether GPUDirect is used.

NCCL falls back to TCP sockets silently when it finds no usable RDMA device, and uses
RDMA without GPUDirect when peer memory is missing: the job runs, only slower. When
the cluster promises a transport (TRAINER_EXPECT_TRANSPORT, TRAINER_EXPECT_GDR), the
trainer points NCCL's debug output at a file before the process group exists, reads
it back after the first collective, and stops the job with a clear message if the
promise is broken.

`trainops doctor nccl` reads the same lines across every rank of a job; this module
reads only its own process's and stays inside the image, which does not ship the
toolkit or its dependencies.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from trainer.config import TransportConfig
from trainer.errors import TransportError

log = logging.getLogger("trainer.transport")

_NETWORK = re.compile(r"NCCL INFO Using network (\S+(?: \S+)*)\s*$")
_IB_DEVICES = re.compile(r"NCCL INFO NET/IB ?: Using (.+?)\s*(?:;\s*OOB .*)?$")
_SOCKET_DEVICES = re.compile(r"NCCL INFO NET/Socket ?: Using (.+)$")
_NO_IB = re.compile(r"NET/IB ?: No device found")
_CHANNEL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? : .* via (NET/\S+)")
_WARN = re.compile(r"NCCL WARN (.*)$")


@dataclass
class TransportEvidence:
    network: str | None = None
    devices: list[str] = field(default_factory=list)
    ib_missing: bool = False
    net_channels: int = 0
    gdr_channels: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str | None:
        """ib, socket, or the plugin's own name."""
        if self.network is None:
            return None
        lowered = self.network.lower()
        if lowered.startswith("ib"):  # IB, or NVIDIA's IBext plugin
            return "ib"
        return "socket" if lowered == "socket" else self.network

    def summary(self) -> str:
        if self.network is None:
            return "NCCL did not report its network"
        text = f"NCCL network {self.network}"
        if self.devices:
            text += " via " + ", ".join(self.devices)
        if self.net_channels:
            text += f"; GPUDirect RDMA on {self.gdr_channels}/{self.net_channels} network channels"
        return text


def parse_nccl_log(text: str) -> TransportEvidence:
    evidence = TransportEvidence()
    for line in text.splitlines():
        line = line.rstrip()
        if match := _NETWORK.search(line):
            evidence.network = match[1]
        elif match := _IB_DEVICES.search(line):
            evidence.devices = [d for d in match[1].split() if re.match(r"^\[\d+\]", d)]
        elif match := _SOCKET_DEVICES.search(line):
            if not evidence.devices:
                evidence.devices = match[1].split()
        elif _NO_IB.search(line):
            evidence.ib_missing = True
        elif match := _CHANNEL.search(line):
            evidence.net_channels += 1
            evidence.gdr_channels += match[1].endswith("/GDRDMA")
        elif match := _WARN.search(line):
            evidence.warnings.append(match[1])
    return evidence


def problems(evidence: TransportEvidence, expect: str, expect_gdr: bool) -> list[str]:
    """Why the evidence breaks the promise; empty when it keeps it."""
    if evidence.kind is None:
        return [
            "NCCL logged no 'Using network' line; the transport cannot be confirmed "
            "(is NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including INIT,NET?)"
        ]
    found = []
    if expect == "ib" and evidence.kind == "socket":
        cause = " (NET/IB: no device found)" if evidence.ib_missing else ""
        found.append(
            f"NCCL fell back to TCP sockets{cause} over {', '.join(evidence.devices) or '?'}; "
            "expected InfiniBand/RoCE: check the pod's RDMA device resource, the memlock "
            "limit (unlimited in the node's runtime for a non-root image), NCCL_IB_HCA "
            "(unset on SR-IOV networks) and that the image has libibverbs"
        )
    elif expect == "socket" and evidence.kind != "socket":
        found.append(f"NCCL uses {evidence.network}, but this cluster expects TCP sockets")
    if expect_gdr and evidence.net_channels and evidence.gdr_channels < evidence.net_channels:
        found.append(
            f"only {evidence.gdr_channels} of {evidence.net_channels} network channels use "
            "GPUDirect RDMA (no /GDRDMA): check the GPU Operator's DMA-BUF or nvidia-peermem "
            "setup and NCCL_NET_GDR_LEVEL"
        )
    return found


CAP_IPC_LOCK = 14


def memlock_problem(cap_eff_hex: str, memlock_soft_limit: int, unlimited: int) -> str | None:
    """Why RDMA memory registration may fail in this process, or None.

    RDMA pins memory: the process needs CAP_IPC_LOCK in effect or an unlimited
    locked-memory limit. A capability added in the pod spec is not in effect for a
    non-root user, so non-root images depend on the runtime's memlock limit.
    """
    if int(cap_eff_hex, 16) >> CAP_IPC_LOCK & 1 or memlock_soft_limit == unlimited:
        return None
    return (
        f"locked-memory limit is {memlock_soft_limit} bytes and IPC_LOCK is not in effect "
        "(added capabilities do not apply to non-root users): RDMA registration can fail; "
        "have the container runtime set memlock to unlimited"
    )


def raise_memlock() -> None:
    """Raise the soft locked-memory limit to the hard one (no privilege needed), so that a
    non-root process gets all the runtime allows before NCCL registers memory."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))


def check_memlock() -> str | None:
    import resource

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    cap_eff = next(
        (line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), "0"
    )
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return memlock_problem(cap_eff, soft, resource.RLIM_INFINITY)


def _expand(pattern: str) -> Path:
    return Path(pattern.replace("%h", socket.gethostname()).replace("%p", str(os.getpid())))


def prepare(env: MutableMapping[str, str]) -> Path:
    """Make NCCL write INIT and NET info to a file we can read; returns its path. Also
    raises the soft memlock limit before NCCL registers any memory."""
    raise_memlock()
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        env["NCCL_DEBUG"] = "INFO"
    subsystems = env.get("NCCL_DEBUG_SUBSYS", "")
    if not subsystems.startswith("^"):
        present = {s.strip().upper() for s in subsystems.split(",") if s.strip()}
        if "ALL" not in present:
            env["NCCL_DEBUG_SUBSYS"] = ",".join(sorted(present | {"INIT", "NET"}))
    if not env.get("NCCL_DEBUG_FILE"):
        env["NCCL_DEBUG_FILE"] = str(Path(tempfile.gettempdir()) / "trainer-nccl.%h.%p.log")
    return _expand(env["NCCL_DEBUG_FILE"])


def verify(log_file: Path, expect: str, expect_gdr: bool) -> TransportEvidence:
    try:
        text = log_file.read_text(errors="replace")
    except FileNotFoundError:
        raise TransportError(
            f"{log_file}: NCCL wrote no debug file; cannot confirm the expected {expect} transport"
        ) from None
    evidence = parse_nccl_log(text)
    found = problems(evidence, expect, expect_gdr)
    if found:
        raise TransportError("; ".join(found))
    return evidence


def confirm(nccl_log: Path, config: TransportConfig, topology) -> str | None:
    """After `prepare` and process group setup: run one collective, then check every
    rank's evidence; all ranks raise together if any rank broke the promise. Returns
    the network this rank's NCCL uses (`TransportEvidence.kind`), None without NCCL."""
    import torch
    import torch.distributed as dist

    if topology.backend != "nccl":
        log.info("transport check skipped: the %s backend does not use NCCL", topology.backend)
        return None
    if config.expect == "ib" and (memlock := check_memlock()):
        log.warning("%s", memlock)
    probe = torch.ones(1, device=topology.device)
    dist.all_reduce(probe)
    torch.cuda.synchronize(topology.device)
    problem, evidence = None, None
    try:
        evidence = verify(nccl_log, config.expect, config.expect_gdr)
    except TransportError as error:
        problem = str(error)
    problems = [None] * topology.world_size
    dist.all_gather_object(problems, problem)
    bad = [f"rank {rank}: {text}" for rank, text in enumerate(problems) if text]
    if bad:
        more = f" (and {len(bad) - 1} more ranks)" if len(bad) > 1 else ""
        raise TransportError(bad[0] + more)
    log.info("transport as expected (%s): %s", config.expect, evidence.summary())
    return evidence.kind
