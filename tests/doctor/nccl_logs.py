"""Per-rank logs in the formats NCCL (INFO lines, `host:pid:tid [dev] NCCL INFO ...`) and
PyTorch's ProcessGroupNCCL watchdog print, for the doctor's tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Rank:
    rank: int
    nranks: int
    host: str
    dev: int
    transport: str = "IB"  # IB | RoCE | Socket
    gdr: bool = True
    complete: bool = True
    interface: str = "net1"
    hca: tuple[str, ...] = ("mlx5_0", "mlx5_1")
    init_seconds: float = 0.9
    comm: str = "0x55d3a8c3d5a0"
    timeout_seq: int | None = None
    timeout_op: str = "ALLREDUCE"
    timeout_ms: int = 600000
    prefix: str = ""  # e.g. kubectl logs --prefix: "[pod/llama-master-0/pytorch] "

    @property
    def pid(self) -> int:
        return 40 + self.dev

    def lines(self) -> list[str]:
        tag = f"{self.host}:{self.pid}:{self.pid}"
        worker = f"{self.host}:{self.pid}:{self.pid + 17}"
        ip = f"10.40.{self.rank // 8}.{5 + self.rank}"

        def info(thread: str, text: str) -> str:
            return f"{self.prefix}{thread} [{self.dev}] NCCL INFO {text}"

        out = [
            info(tag, f"Bootstrap : Using {self.interface}:{ip}<0>"),
            info(tag, "NCCL_SOCKET_IFNAME set by environment to =net1"),
            info(tag, "cudaDriverVersion 12040"),
        ]
        if self.rank == 0:
            out.append(f"{self.prefix}NCCL version 2.21.5+cuda12.4")
        out.append(info(worker, f"NCCL_IB_HCA set to ={','.join(self.hca)}"))
        if self.transport == "Socket":
            out += [
                info(worker, "NET/IB : No device found."),
                info(worker, f"NET/Socket : Using [0]{self.interface}:{ip}<0>"),
                info(worker, "Using network Socket"),
            ]
        else:
            layer = "RoCE" if self.transport == "RoCE" else "IB"
            devices = " ".join(f"[{i}]{h}:1/{layer}" for i, h in enumerate(self.hca))
            out += [
                info(worker, f"NET/IB : Using {devices} [RO]; OOB {self.interface}:{ip}<0>"),
                info(worker, "Using network IB"),
            ]
        ident = (
            f"comm {self.comm} rank {self.rank} nranks {self.nranks} cudaDev {self.dev} "
            f"nvmlDev {self.dev} busId {18 + self.dev}000 commId 0x9ad9b5e4ab2566da"
        )
        out.append(info(worker, f"{ident} - Init START"))
        if not self.complete:
            return out
        peer = (self.rank + 1) % self.nranks
        via = {"Socket": "NET/Socket/0", "IB": "NET/IB/0", "RoCE": "NET/IB/0"}[self.transport]
        if self.gdr and self.transport != "Socket":
            via += "/GDRDMA"
        out += [
            info(worker, f"Channel 00/0 : {self.rank}[{self.dev}] -> {peer}[0] [send] via {via}"),
            info(
                worker, f"Channel 01/0 : {peer}[0] -> {self.rank}[{self.dev}] [receive] via {via}"
            ),
            info(worker, "Connected all rings"),
            info(worker, f"{ident} - Init COMPLETE"),
            info(
                worker,
                f"Init timings - ncclCommInitRank: rank {self.rank} nranks {self.nranks} "
                f"total {self.init_seconds:.2f} (kernels 0.31, alloc 0.05, bootstrap "
                "0.12, allgathers 0.02, topo 0.30, graphs 0.03, connections 0.11, "
                "rest 0.01)",
            ),
        ]
        if self.timeout_seq is None and self.rank == 0:
            out += [
                f"{self.prefix}step {n} | loss {3.2 - n / 100:.4f} | 1.21 s/step" for n in (10, 20)
            ]
        if self.timeout_seq is not None:
            out.append(
                f"{self.prefix}[rank{self.rank}]:[E1121 02:07:08.408271257 "
                f"ProcessGroupNCCL.cpp:632] [Rank {self.rank}] "
                "Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum={self.timeout_seq}, OpType={self.timeout_op}, "
                f"NumelIn=466119168, NumelOut=466119168, Timeout(ms)={self.timeout_ms}) ran for "
                f"{self.timeout_ms + 60} milliseconds before timing out."
            )
        return out


def job(nodes: int = 2, gpus: int = 2, **overrides) -> list[Rank]:
    """Ranks of a job: node n runs ranks n*gpus .. n*gpus+gpus-1."""
    hosts = ["llama-master-0"] + [f"llama-worker-{i}" for i in range(nodes - 1)]
    return [
        Rank(rank=n * gpus + g, nranks=nodes * gpus, host=hosts[n], dev=g, **overrides)
        for n in range(nodes)
        for g in range(gpus)
    ]


def write_per_pod(directory: Path, ranks: list[Rank]) -> Path:
    """One file per pod with its ranks' lines interleaved, as `kubectl logs` shows them."""
    directory.mkdir(parents=True, exist_ok=True)
    by_host: dict[str, list[list[str]]] = {}
    for rank in ranks:
        by_host.setdefault(rank.host, []).append(rank.lines())
    for host, groups in by_host.items():
        merged = [line for chunk in zip(*_padded(groups), strict=True) for line in chunk if line]
        (directory / f"{host}.log").write_text("\n".join(merged) + "\n")
    return directory


def _padded(groups: list[list[str]]) -> list[list[str]]:
    longest = max(len(g) for g in groups)
    return [g + [""] * (longest - len(g)) for g in groups]
