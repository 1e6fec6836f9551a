"""`trainops doctor nccl` classifies real-format NCCL logs from files alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.doctor.nccl_logs import Rank, job, write_per_pod


def doctor(trainops, *args: str):
    run = trainops("doctor", "nccl", "--format", "json", *args)
    assert run.code in (0, 1), run.err
    return run.code, json.loads(run.out)


def rules(report: dict) -> dict[str, dict]:
    return {f["rule"]: f for f in report["findings"]}


def test_healthy_ib_with_gpudirect_is_clean(trainops, tmp_path):
    code, report = doctor(
        trainops, str(write_per_pod(tmp_path, job(nodes=2, gpus=4))), "--expect", "ib"
    )
    assert code == 0 and report["findings"] == []
    assert [r["rank"] for r in report["ranks"]] == list(range(8))
    assert {
        (r["transport"], r["gdr"], r["init_complete"], r["nranks"]) for r in report["ranks"]
    } == {("IB", True, True, 8)}
    assert report["ranks"][0]["env"]["NCCL_SOCKET_IFNAME"] == "=net1"
    assert report["ranks"][0]["version"] == "2.21.5+cuda12.4"


def test_roce_without_gpudirect_is_a_warning(trainops, tmp_path):
    code, report = doctor(trainops, str(write_per_pod(tmp_path, job(transport="RoCE", gdr=False))))
    assert code == 0
    assert {r["transport"] for r in report["ranks"]} == {"RoCE"}
    finding = rules(report)["no-gdr"]
    assert finding["severity"] == "warning" and finding["ranks"] == [0, 1, 2, 3]


def test_a_single_rank_falling_back_to_sockets_is_named(trainops, tmp_path):
    ranks = job()
    ranks[3].transport = "Socket"
    code, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)))
    assert code == 1
    finding = rules(report)["socket-fallback"]
    assert finding["ranks"] == [3]
    assert (
        "rank 3 fell back to TCP sockets (NET/IB: no device found) while ranks 0-2 use IB"
        in finding["message"]
    )


def test_an_init_hang_and_the_rank_on_the_wrong_interface(trainops, tmp_path):
    ranks = job(complete=False)
    ranks[3].interface = "eth0"
    code, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)))
    assert code == 1
    found = rules(report)
    assert found["init-incomplete"]["ranks"] == [0, 1, 2, 3]
    assert "NCCL_SOCKET_IFNAME==net1" in found["init-incomplete"]["fix"]
    assert found["interface-mismatch"]["ranks"] == [3]
    assert "bootstraps over eth0, not =net1" in found["interface-mismatch"]["message"]


def test_nranks_disagreement_from_a_stale_launch(trainops, tmp_path):
    current = job(nodes=2, gpus=2)
    stale = [
        Rank(rank=r, nranks=2, host="llama-worker-7", dev=r + 4, comm="0x7f00aa") for r in (0, 1)
    ]
    write_per_pod(tmp_path / "a", current)
    write_per_pod(tmp_path / "b", stale)
    code, report = doctor(trainops, str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 1
    finding = rules(report)["nranks-mismatch"]
    assert "disagree on the world size: 2 (ranks 0, 1); 4 (ranks 0-3)" in finding["message"]


def test_a_watchdog_timeout_points_at_the_silent_rank(trainops, tmp_path):
    ranks = job()
    for rank in ranks[:3]:
        rank.timeout_seq = 1580
    for rank in ranks:
        rank.prefix = f"[pod/{rank.host}/pytorch] "  # kubectl logs --prefix
    code, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)))
    assert code == 1
    finding = rules(report)["collective-timeout"]
    assert finding["ranks"] == [0, 1, 2]
    assert "timed out after 600s in ALLREDUCE (SeqNum 1580)" in finding["message"]
    assert "rank 3 reported no timeout" in finding["message"]
    assert "collective-mismatch" not in rules(report)
    timeouts = {r["rank"]: r["timeouts"] for r in report["ranks"]}
    assert timeouts[0] == [{"seq": 1580, "op": "ALLREDUCE", "timeout_ms": 600000, "ran_ms": 600060}]


def test_ranks_in_different_collectives_are_a_program_bug(trainops, tmp_path):
    ranks = job()
    for rank in ranks:
        rank.timeout_seq = 80078
    ranks[3].timeout_op = "BROADCAST"
    code, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)))
    assert code == 1
    assert "BROADCAST #80078 on rank 3" in rules(report)["collective-mismatch"]["message"]


def test_a_timeout_shorter_than_pytorchs_default_is_named(trainops, tmp_path):
    """A 60 s process-group timeout (the job's own) trips on a rank that is only slow; the
    default 10 minutes gets no such remark."""
    ranks = job()
    for rank in ranks[:3]:
        rank.timeout_seq, rank.timeout_ms = 42, 60000
    _, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)))
    finding = rules(report)["collective-timeout"]
    assert (
        "the process group's timeout, 60s, is shorter than PyTorch's default" in finding["message"]
    )
    assert "init_process_group(timeout=...)" in finding["fix"]
    for rank in ranks[:3]:
        rank.timeout_ms = 600000
    _, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)))
    assert "shorter than PyTorch's defaults" not in rules(report)["collective-timeout"]["message"]


def test_missing_ranks_and_stragglers(trainops, tmp_path):
    ranks = job(nodes=2, gpus=4)
    ranks[5].init_seconds = 14.0
    del ranks[6:]
    code, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)))
    assert code == 0  # warnings only
    found = rules(report)
    assert found["missing-ranks"]["ranks"] == [6, 7]
    assert found["init-straggler"]["ranks"] == [5]


SHARED_ROCE = """\
fabric: roce
network: host-device
nic: ens1f0
hca: [mlx5_0, mlx5_1]
gidIndex: 3
rdmaResource: rdma/rdma_shared_device_a
gpusPerNode: 8
nodes: 4
storageClass: cephfs
scheduler: default
gpuProduct: NVIDIA-H100-80GB-HBM3
image: ghcr.io/example-org/trainops-trainer:0.1.0
"""


def test_overlay_expectations_name_the_profile_key(trainops, workspace, tmp_path):
    profile = tmp_path / "shared-roce.yaml"
    profile.write_text(SHARED_ROCE)
    made = trainops("new-cluster", "shared-roce", "--from", str(profile), cwd=workspace)
    assert made.code == 0, made.err
    ranks = job(hca=("mlx5_0", "mlx5_10"))
    ranks[2].transport = "Socket"
    overlay = str(workspace / "overlays/shared-roce")
    code, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)), "--overlay", overlay)
    assert code == 1
    found = rules(report)
    assert "`rdmaResource` (now rdma/rdma_shared_device_a)" in found["socket-fallback"]["fix"]
    hca = found["hca-outside-profile"]
    assert "uses mlx5_10, which is not among mlx5_0, mlx5_1" in hca["message"]
    assert "`hca`" in hca["fix"]


def test_an_interface_fix_on_an_sriov_network_names_its_vf_not_nic(trainops, workspace, tmp_path):
    """Issue 43 item 8: `nic` is the host interface of macvlan and host-device networks only;
    on prod-roce (sriov-roce) the pod's interface is the VF it requests."""
    ranks = job()
    ranks[1].interface = "docker0"
    overlay = str(workspace / "overlays/prod-roce")
    code, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)), "--overlay", overlay)
    assert code == 1
    fix = rules(report)["unroutable-interface"]["fix"]
    assert "`network` (sriov-roce)" in fix and "`rdmaResource` (now nvidia.com/roce_vf)" in fix
    assert "`nic`" not in fix
    profile = tmp_path / "shared-roce.yaml"
    profile.write_text(SHARED_ROCE)
    assert trainops("new-cluster", "shared-roce", "--from", str(profile), cwd=workspace).code == 0
    shared = str(workspace / "overlays/shared-roce")
    _, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)), "--overlay", shared)
    assert "`nic` (now ens1f0)" in rules(report)["unroutable-interface"]["fix"]


def test_a_device_fix_on_an_sriov_network_does_not_name_hca(trainops, workspace, tmp_path):
    """Issue 43 (walkthrough 2): `hca` is for shared devices; the overlay generates no
    NCCL_IB_HCA on SR-IOV networks, where a pod sees only the VFs it requests."""
    ranks = job(transport="RoCE")
    ranks[3].transport = "Socket"
    overlay = str(workspace / "overlays/prod-roce")
    _, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)), "--overlay", overlay)
    fix = rules(report)["socket-fallback"]["fix"]
    assert "`rdmaResource` (now nvidia.com/roce_vf)" in fix and "`hca` does not apply" in fix
    assert "`hca` (now" not in fix
    profile = tmp_path / "shared-roce.yaml"
    profile.write_text(SHARED_ROCE)
    assert trainops("new-cluster", "shared-roce", "--from", str(profile), cwd=workspace).code == 0
    shared = str(workspace / "overlays/shared-roce")
    _, report = doctor(trainops, str(write_per_pod(tmp_path, ranks)), "--overlay", shared)
    assert "`hca` (now ['mlx5_0', 'mlx5_1'])" in rules(report)["socket-fallback"]["fix"]


def test_a_fix_naming_nccl_variables_says_where_the_profile_sets_them(trainops, tmp_path):
    """Issue 43 (walkthrough 2): with --overlay, NCCL_IB_GID_INDEX is the profile's `gidIndex`
    and variables the profile has no key for go in its `nccl` map; without it, the fix is
    NCCL's own."""
    log = tmp_path / "rank.log"
    log.write_text(
        "node-a:1234:1300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; "
        "OOB net1:10.0.0.1<0>\n"
        "node-a:1234:1300 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from "
        "peer 10.0.0.2<34567> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
        "::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 hca mlx5_0\n"
    )
    _, plain = doctor(trainops, str(log))
    fix = rules(plain)["ib-completion-error"]["fix"]
    assert "NCCL_IB_GID_INDEX" in fix and "cluster.yaml" not in fix
    _, report = doctor(trainops, str(log), "--overlay", "overlays/prod-roce")
    fix = rules(report)["ib-completion-error"]["fix"]
    assert (
        "NCCL_IB_GID_INDEX comes from `gidIndex` (now 3) in overlays/prod-roce/cluster.yaml" in fix
    )
    assert "NCCL_IB_TC, NCCL_CROSS_NIC go in the `nccl` map" in fix


def test_no_nccl_output_is_a_one_line_input_error(trainops, tmp_path):
    log = tmp_path / "app.log"
    log.write_text("epoch 1 loss 2.3\n")
    run = trainops("doctor", "nccl", str(log))
    assert run.code == 2 and "NCCL_DEBUG=INFO" in run.err
    assert len(run.err.strip().splitlines()) == 1


def test_text_report_has_a_rank_table(trainops, tmp_path):
    ranks = job()
    ranks[1].transport = "Socket"
    run = trainops("doctor", "nccl", str(write_per_pod(tmp_path, ranks)))
    assert run.code == 1
    assert run.out.splitlines()[0].split() == [
        "rank",
        "nranks",
        "host",
        "init",
        "transport",
        "gdr",
        "interface",
        "warn",
        "timeouts",
    ]
    assert "error: rank 1 fell back to TCP sockets" in run.out


@pytest.mark.parametrize("layout", ["per-pod", "stdin"])
def test_logs_from_stdin_or_files_give_the_same_ranks(trainops, tmp_path, layout):
    directory = write_per_pod(tmp_path, job())
    if layout == "stdin":
        text = "".join(p.read_text() for p in sorted(Path(directory).iterdir()))
        run = trainops("doctor", "nccl", "--format", "json", "-", stdin=text)
    else:
        run = trainops("doctor", "nccl", "--format", "json", str(directory))
    assert [r["rank"] for r in json.loads(run.out)["ranks"]] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "error, broken",
    [
        ("libnccl-net.so: cannot open shared object file: No such file or directory", False),
        (
            "/usr/lib/libfabric.so.1: version `FABRIC_1.7' not found (required by "
            "/opt/aws-ofi-nccl/lib/libnccl-net.so)",
            True,
        ),
        ("libfabric.so.1: cannot open shared object file: No such file or directory", True),
    ],
    ids=["no-plugin", "symbol-version", "dependency-missing"],
)
def test_a_plugin_that_exists_and_fails_to_load_is_a_silent_fallback(error, broken):
    from trainops.doctor.analysis import diagnose
    from trainops.doctor.expectation import Expectation
    from trainops.doctor.sources import memory_stream

    lines = [
        "h:7:9 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START",
        f"h:7:9 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : {error}",
        "h:7:9 [0] NCCL INFO NET/IB : No device found.",
        "h:7:9 [0] NCCL INFO Using network Socket",
    ]
    diagnosis = diagnose([memory_stream("log", lines)], Expectation())
    said = {f.rule: f for f in diagnosis.findings}
    assert ("net-plugin-failed" in said) == broken
    if broken:
        assert "could not be loaded" in said["net-plugin-failed"].message
