"""Families of failures the doctor names from the components' own messages, each line printed
as its component prints it (the format at the source named in each test), so that any log
of the family is named, not one thread's."""

from __future__ import annotations

import json

import pytest

from trainops.doctor import analysis, catalog
from trainops.doctor.expectation import Expectation
from trainops.doctor.sources import memory_stream


def _findings(*lines: str):
    return analysis.diagnose([memory_stream("log", list(lines))], Expectation()).findings


def _by_rule(*lines: str) -> dict:
    return {f.rule: f for f in _findings(*lines)}


def test_thc_cuda_runtime_error_of_old_torch_is_read_as_the_cuda_error_it_names():
    """torch < 1.5, THCGeneral.cpp: `cuda runtime error (%d) : %s at %s:%d`."""
    found = _by_rule(
        "RuntimeError: cuda runtime error (101) : invalid device ordinal at "
        "/opt/conda/conda-bld/pytorch/aten/src/THC/THCGeneral.cpp:51"
    )
    assert "launch-config-invalid" in found and "cuda-fatal" not in found


def test_thc_check_fail_line_of_old_torch_is_read_as_the_cuda_error_it_names():
    """torch < 1.5, THCGeneral.cpp's __THCudaCheck printed this line before raising."""
    found = _by_rule(
        "THCudaCheck FAIL file=/pytorch/torch/csrc/cuda/Module.cpp line=59 error=101 : "
        "invalid device ordinal"
    )
    assert "launch-config-invalid" in found and "cuda-fatal" not in found


def test_the_string_older_cuda_printed_for_a_busy_gpu_names_exclusive_mode():
    """CUDA 10 and older: cudaErrorDevicesUnavailable printed 'all CUDA-capable devices are
    busy or unavailable' (c10's `CUDA error: %s`)."""
    found = _by_rule("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable")
    assert "Exclusive Process" in found["duplicate-gpu"].fix


def test_a_cuda_string_that_itself_says_cuda_is_read_without_a_prefix():
    entry = catalog.lookup("CUDA driver version is insufficient for CUDA runtime version")
    assert entry is not None and entry.finding == "cuda-driver-too-old"


def test_the_elastic_agent_reporting_exitcode_minus_9_names_the_oom_killer():
    """torch/distributed/elastic/multiprocessing/api.py: `failed (exitcode: %s) local_rank:
    %s (pid: %s) of binary: %s`."""
    found = _by_rule(
        "E1202 10:01:02.123000 812 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -9) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3"
    )
    assert "OOM killer" in found["rank-killed"].message


@pytest.mark.parametrize(
    "line",
    [
        "Killed",
        "bash: line 1:  4711 Killed                  python train.py",
        "    Exit Code:    137",
        "worker-1 exited with code 137",
    ],
    ids=["shell", "shell-job", "describe", "exit-137"],
)
def test_a_shell_or_container_reporting_sigkill_names_the_oom_killer(line):
    found = _by_rule("epoch 3, step 120", line)
    assert "OOM killer" in found["rank-killed"].message


def test_a_sentence_with_the_word_killed_is_not_a_sigkill():
    assert "rank-killed" not in _by_rule("Killed workers 3 of 4 after the timeout")


def test_the_kernel_oom_killer_line_is_a_killed_rank():
    """Linux mm/oom_kill.c: `%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, ...`."""
    found = _by_rule(
        "[81234.567890] Memory cgroup out of memory: Killed process 4242 (python3) "
        "total-vm:98765432kB, anon-rss:65432100kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
        "pgtables:130000kB oom_score_adj:0"
    )
    assert "OOM killer killed" in found["rank-killed"].message


def test_a_worker_ended_by_sigbus_names_dev_shm():
    """ChildFailedError's table (torch/distributed/elastic/multiprocessing/errors):
    `exitcode  : -7` and `Signal %d (%s) received by PID %d`."""
    found = _by_rule(
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "  exitcode  : -7 (pid: 311)",
        "  traceback : Signal 7 (SIGBUS) received by PID 311",
    )
    assert "SIGBUS" in found["shm-exhausted"].message
    assert "/dev/shm" in found["shm-exhausted"].message


def test_nvml_driver_library_mismatch_names_the_reboot():
    """nvidia-smi: `Failed to initialize NVML: %s` with nvmlErrorString's text."""
    found = _by_rule("Failed to initialize NVML: Driver/library version mismatch")
    assert "Reboot" in found["nvml-error"].fix


def test_gloo_pairs_of_two_address_families_are_named():
    """gloo/transport/tcp/device.cc: GLOO_ENFORCE_EQ(ss1.ss_family, ss2.ss_family)."""
    found = _by_rule(
        "RuntimeError: [enforce fail at /opt/pytorch/third_party/gloo/gloo/transport/tcp/"
        "device.cc:212] ss1.ss_family == ss2.ss_family. 10 vs 2"
    )
    assert "gloo-address-family" in found


def test_gloo_host_name_without_a_local_address_is_not_read_as_an_interface_name():
    """gloo/transport/tcp/device.cc prints 'Unable to find address for: ' from the host-name
    lookup (`rp != nullptr`) and from the interface lookup (`ifa != nullptr`)."""
    [hostname] = _findings(
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] "
        "rp != nullptr. Unable to find address for: worker-3.example"
    )
    assert "host name worker-3.example" in hostname.message
    assert "GLOO_SOCKET_IFNAME" in hostname.fix
    assert "GLOO_SOCKET_IFNAME=" not in hostname.message
    [iface] = _findings(
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:70] "
        "ifa != nullptr. Unable to find address for: eth9"
    )
    assert "GLOO_SOCKET_IFNAME=eth9" in iface.message


def test_a_failed_dmabuf_registration_names_dmabuf_support():
    """NCCL src/misc/ibvwrap.cc: IBV_PTR_CHECK_ERRNO's `Call to ibv_reg_dmabuf_mr failed with
    error %s` (NCCL sets EOPNOTSUPP itself when libibverbs lacks the symbol)."""
    found = _by_rule(
        "gpu-7:311:402 [2] NCCL INFO comm 0x1 rank 2 nranks 16 cudaDev 2 busId 4000 - Init START",
        "gpu-7:311:402 [2] misc/ibvwrap.cc:201 NCCL WARN Call to ibv_reg_dmabuf_mr failed with "
        "error Operation not supported",
    )
    assert "NCCL_DMABUF_ENABLE=0" in found["ib-memory-registration"].fix


def test_a_truncated_bootstrap_message_does_not_assert_version_skew():
    """NCCL src/bootstrap.cc: `Message truncated : received %d bytes instead of %d` (the two
    ends disagree; with one NCCL everywhere it is the release's own bug)."""
    found = _by_rule(
        "gpu-2:80:91 [0] bootstrap.cc:77 NCCL WARN Message truncated : received 512 bytes "
        "instead of 8",
    )
    assert "nccl-version-mismatch" not in found
    assert "bug of that release" in found["nccl-internal-error"].message


_ONE_RANK_TESTS = [
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 8388608 step: 2(factor) warmup iters: 5 iters: 20",
    "#",
    "# Using devices",
    "#  Rank  0 Group  0 Pid   4711 on    box-a device  0 [0x41] NVIDIA L4",
    "box-a:4711:4711 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
    "box-a:4711:4720 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
    "box-a:4711:4719 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by "
    "remote peer localhost<41234>",
]


def test_a_one_rank_nccl_test_over_loopback_blames_the_host_not_the_interface():
    """nccl-tests lists every rank with its host (src/common.cu); with one rank loopback is
    the right interface and the peer is the process itself."""
    found = _by_rule(*_ONE_RANK_TESTS)
    assert "unroutable-interface" not in found
    assert "security" in found["bootstrap-connect-failed"].message


def test_an_nccl_test_hanging_on_one_host_names_acs_and_the_iommu():
    """NCCL's troubleshooting guide: ACS / IOMMU redirecting P2P through the root complex
    cause a hang; nccl-tests' older rank line `Rank %2d uses device %2d [0x%02x] %s`,
    pasted as a quote."""
    lines = ["> Using devices"] + [
        f">   Rank  {r} uses device  {r} [0x{r + 4:02x}] Tesla P100-PCIE-16GB" for r in range(4)
    ]
    [finding] = _findings(*lines)
    assert finding.rule == "outcome-unproven"
    assert "ACS" in finding.message and "iommu=pt" in finding.fix


def test_a_log_ending_in_nvls_setup_is_a_hang_in_nvls_not_a_refusal():
    """NCCL src/transport/nvls.cc: INFO `NVLS Bind mem %p UC handle 0x%llx MC handle 0x%llx
    size %zu`."""
    [finding] = _findings(
        "hgx-4:90:99 [3] NCCL INFO NVLS Bind mem 0x7f2000000 UC handle 0x55d0 MC handle 0x55e0 "
        "size 2097152"
    )
    assert finding.rule == "outcome-unproven" and "NCCL_NVLS_ENABLE=0" in finding.fix


def test_the_tcp_provider_selected_by_aws_ofi_nccl_names_missing_efa_devices():
    """aws-ofi-nccl src/nccl_ofi_net.cpp: `Selected Provider is %s (found %d nics)`."""
    found = _by_rule(
        "p4d-1:55:60 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.0-aws",
        "p4d-1:55:60 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 4 nics)",
    )
    assert "EFA" in found["net-plugin-failed"].message


def test_the_efa_provider_selected_is_no_finding():
    found = _by_rule(
        "p4d-1:55:60 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
        "p4d-1:55:55 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 busId 1000 - Destroy "
        "COMPLETE",
    )
    assert "net-plugin-failed" not in found


def test_a_custom_all_reduce_without_peer_access_names_disabling_it():
    """vLLM csrc/custom_all_reduce.cuh's CUDACHECK: `Failed: Cuda error %s:%d '%s'`."""
    found = _by_rule(
        "Failed: Cuda error /workspace/vllm/csrc/custom_all_reduce.cuh:368 'peer access is "
        "not supported between these two devices'"
    )
    assert "disable-custom-all-reduce" in found["p2p-unsupported"].fix


def test_a_gpu_index_the_process_does_not_see_is_a_launch_error():
    """torch/cuda/__init__.py's deferred error around ATen's getDeviceProperties assert."""
    found = _by_rule(
        "torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with "
        'error: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "../aten/src/ATen/'
        'cuda/CUDAContext.cpp":50, please report a bug to PyTorch.'
    )
    assert "launch-config-invalid" in found and "MIG" in found["launch-config-invalid"].message


def test_nccls_fabric_manager_line_of_a_wrapped_nvls_warning_names_the_fabric_manager():
    """NCCL src/transport/nvls.cc: the NVLS warning's second line, pasted without the first."""
    found = _by_rule(
        "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 4194304",
        "This is usually caused by a system or configuration error in the Fabric Manager or "
        "NVSwitches.",
    )
    assert "nvswitch-fabric" in found


def test_open_mpi_refused_cross_memory_attach_names_the_ptrace_capability():
    """Open MPI opal/mca/btl/vader/btl_vader_get.c: `Read %ld, expected %lu, errno = %d`, as
    opal_output prints it (`[host:pid] `) under mpirun's --tag-output."""
    found = _by_rule(
        "[1,2]<stderr>:[gpu-node-4:9311] Read -1, expected 65536, errno = 1",
        "[1,3]<stderr>:[gpu-node-4:9312] Read -1, expected 65536, errno = 1",
    )
    assert "SYS_PTRACE" in found["nccl-system-error"].fix
    assert "EPERM" in found["nccl-system-error"].message


def test_a_failed_efa_address_vector_insert_leads_with_the_security_group():
    """aws-ofi-nccl src/nccl_ofi_sendrecv.cpp: `Unable to insert remote address into address
    vector for device %d.`; the AWS EFA user guide's security group rule."""
    found = _by_rule(
        "p5-2:70:80 [1] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)",
        "p5-2:70:80 [1] nccl_ofi_sendrecv.cpp:1633 NCCL WARN NET/OFI Unable to insert remote "
        "address into address vector for device 3.",
    )
    assert found["ib-qp-connect-failed"].fix.startswith("Allow EFA traffic")


def test_a_wrapped_watchdog_timeout_after_the_training_loop_names_a_rank_zero_only_collective():
    """ProcessGroupNCCL's watchdog message wrapped after its first clause, after Lightning's
    fit loop printed "`Trainer.fit` stopped: `max_epochs=...` reached." (fit_loop.py)."""
    found = _by_rule(
        "`Trainer.fit` stopped: `max_epochs=3` reached.",
        "[rank0]:[E1202 09:00:00.000000 77 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout:",
        "    WorkNCCL(SeqNum=9120, OpType=BROADCAST, NumelIn=12, NumelOut=12, Timeout(ms)=600000)",
        "    ran for 600042 milliseconds before timing out.",
    )
    timeout = found["collective-timeout"]
    assert "BROADCAST" in timeout.message and "rank-0-only" in timeout.message
    assert "every rank" in timeout.fix


def test_libfabric_refusing_sync_memops_on_a_gpu_buffer_names_the_efa_parameter():
    """libfabric 1.18-1.19's EFA provider sets SYNC_MEMOPS on every CUDA buffer it registers;
    the CUDA error it prints is not a MIG instance's."""
    found = _by_rule(
        "libfabric:6522:1713524816::core:core:cuda_set_sync_memops():207<warn> Failed to "
        "perform cuPointerSetAttribute: CUDA_ERROR_NOT_SUPPORTED:operation not supported",
        "libfabric:6522:1713524816::efa:mr:efa_mr_hmem_setup():254<warn> unable to set memops "
        "for cuda ptr",
        "libfabric:6522:1713524816::efa:mr:efa_mr_regattr():1014<warn> Unable to register MR: "
        "Invalid argument",
    )
    assert (
        "efa-cuda-memops" in found
        and "FI_EFA_SET_CUDA_SYNC_MEMOPS=0" in found["efa-cuda-memops"].fix
    )
    assert "mig-device-unsupported" not in found


def test_operation_not_supported_is_read_as_mig_only_where_the_log_shows_mig():
    error = "RuntimeError: CUDA error: operation not supported"
    assert "mig-device-unsupported" not in _by_rule(error)
    mig = _by_rule(
        "CUDA_VISIBLE_DEVICES=MIG-5f1c2e0a-8d3b-5b8e-9c61-0c2c7f3e9a10",
        error,
    )
    assert "mig-device-unsupported" in mig


def test_ucx_failing_to_pin_a_completion_queue_names_the_locked_memory_limit():
    """UCX (ib_iface.c) logs `ibv_create_cq(cqe=%d) failed: %s` in its own line format, and
    Open MPI's pml ucx follows with its own error: the limit is named, not the MPI error."""
    found = _by_rule(
        "[1652739463.054681] [cn0022:4071024:0]        ib_iface.c:1377 UCX  ERROR "
        "ibv_create_cq(cqe=4096) failed: Cannot allocate memory",
        "[cn0022:4071024] pml_ucx.c:309  Error: Failed to create UCP worker",
    )
    assert "ib-memory-registration" in found
    assert "ucx/blob/v1.22.0" in found["ib-memory-registration"].message


def test_ucx_shared_memory_fifo_failure_names_dev_shm():
    found = _by_rule(
        "[1700000000.000001] [worker-0:77:0]       mm_iface.c:816  UCX  ERROR "
        "mm_iface failed to allocate receive FIFO",
        "[worker-0:77:0:77] Caught signal 11 (Segmentation fault: address not mapped)",
    )
    assert "shm-exhausted" in found and "/dev/shm" in found["shm-exhausted"].fix


def test_a_misspelt_ucx_setting_is_a_warning_naming_the_variable():
    found = _by_rule(
        "[1700000000.000001] [worker-0:77:0]     parser.c:2578 UCX  WARN  unused environment "
        "variable: UCX_IB_GID_INDX (maybe: UCX_IB_GID_INDEX?)"
    )
    assert found["ucx-config-unused"].severity == "warning"
    assert "UCX_IB_GID_INDX" in " ".join(found["ucx-config-unused"].evidence)


def test_nccls_result_string_in_an_old_torch_error_names_the_failed_system_call():
    """NCCL src/init.cc ncclGetErrorString: 2.4-2.12 print `unhandled system error` without
    the `(run with NCCL_DEBUG=INFO for details)` tail that torch quotes after file:line."""
    found = _by_rule(
        "RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled "
        "system error, NCCL version 2.7.8"
    )
    assert "failure-unrecognised" not in found
    assert "/dev/shm" in found["nccl-system-error"].fix


def test_nccl_tests_quoting_the_remote_error_names_gpudirect_and_acs_as_the_check():
    """nccl-tests common.cu prints `Test NCCL failure %s:%d '%s'` with ncclGetErrorString."""
    found = _by_rule(
        "node-2: Test NCCL failure common.cu:303 'remote process exited or there was a network "
        "error / '"
    )
    assert "NCCL_NET_GDR_LEVEL=0" in found["nccl-remote-error"].fix


def test_a_restated_result_is_not_reported_beside_the_line_that_says_why():
    """The torch line that quotes NCCL's result adds nothing beside the catalogued cause."""
    found = _by_rule(
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled cuda error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    )
    assert "gpu-arch-unsupported" in found and "cuda-fatal" not in found


def test_a_bind_failure_of_nccls_own_socket_names_the_port_range():
    """NCCL src/misc/socket.cc ncclSocketListen: SYSCHECK(bind(...), "bind") on port 0 prints
    `Call to bind failed: %s` (2.23 on; `failed : %s` before)."""
    for warn in (
        "Call to bind failed: Address already in use",
        "Call to bind failed : Address already in use",
    ):
        found = _by_rule(f"gpu-9:70:71 [3] misc/socket.cc:137 NCCL WARN {warn}")
        assert "ip_local_port_range" in found["nccl-bind-failed"].fix, warn
        assert "failure-unrecognised" not in found


def test_nccl_2_25_lowering_the_kernels_shared_memory_is_a_launch_failure():
    """NCCL 2.25.1 src/enqueue.cc: the INFO is printed, the attribute lowered, and the launch
    still asks for ncclShmemDynamicSize."""
    found = _by_rule(
        "pc:12:12 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856"
    )
    assert "2.26" in found["gpu-arch-unsupported"].fix


def test_the_efa_providers_out_of_memory_abort_names_the_locked_memory_limit():
    """libfabric prov/efa/src/efa_base_ep.c: the abort block's `Libfabric error: (%zd) %s`."""
    found = _by_rule(
        "Libfabric EFA provider has encountered an internal error:",
        "Libfabric error: (-12) Cannot allocate memory",
        "EFA internal error: (4112) Failure to post internal receive buffers",
    )
    assert "ulimit -l unlimited" in found["efa-resource-exhausted"].fix


def test_ucx_failing_to_create_an_address_handle_names_ucx_net_devices():
    """UCX src/uct/ib/base/ib_device.c: `ibv_create_ah(%s) for %s on %s failed: %m` (1.12
    on; `ibv_create_ah(%s) on %s failed: %m` in 1.10-1.11)."""
    for line in (
        "[1700000000.1] [n1:5:0]  ib_device.c:1451 UCX  ERROR ibv_create_ah(dlid=0 sl=0 "
        "port=1 src_path_bits=0 dgid=::ffff:10.1.2.3 sgid_index=3) for UD connect on mlx5_1 "
        "failed: Invalid argument",
        "[1700000000.1] [n1:5:0]  ib_device.c:1319 UCX  ERROR ibv_create_ah(dlid=0 sl=0 "
        "port=1 dgid=::ffff:10.1.2.3 sgid_index=1) on mlx5_1 failed: Invalid argument",
    ):
        found = _by_rule(line)
        assert "UCX_NET_DEVICES" in found["ucx-address-unreachable"].fix, line


def test_rdma_error_4_and_12_carry_the_fix_of_their_own_cause():
    """rdma-core verbs.h IBV_WC_LOC_PROT_ERR (4), IBV_WC_RETRY_EXC_ERR (12)."""
    warn = (
        "gpu-1:40:41 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.2<5> with status={status} opcode=0 len=0 vendor err 81 (Send) localGid ::1 "
        "remoteGids fe80::1 hca mlx5_0"
    )
    protection = _by_rule(warn.format(status=4))
    retry = _by_rule(warn.format(status=12))
    assert "ACS" in protection["ib-completion-error"].fix
    assert "MTU" in retry["ib-completion-error"].fix
    assert protection["ib-completion-error"].fix != retry["ib-completion-error"].fix


def test_peer_access_refused_in_the_shm_transport_names_cumem_host_memory():
    """NCCL >= 2.24 transport/shm.cc maps cuMem host buffers (NCCL_CUMEM_HOST_ENABLE)."""
    found = _findings(
        "l4-0:774:774 [1] transport/shm.cc:590 NCCL WARN Cuda failure 217 'peer access is not "
        "supported between these two devices'"
    )
    p2p = [f for f in found if f.rule == "p2p-unsupported"]
    assert len(p2p) == 1 and "NCCL_CUMEM_HOST_ENABLE=0" in p2p[0].fix
    assert all("NCCL_P2P_DISABLE" not in f.fix for f in found)


def test_nccl_lines_run_together_are_read_one_by_one():
    """A paste that lost its newlines: the next header is not part of the value before it."""
    found = _by_rule(
        "[0] NCCL INFO NCCL_IB_DISABLE set by environment to 0. [0] NCCL INFO NCCL_IB_HCA set to "
        "mlx5_0:1,mlx5_1:1 [0] NCCL INFO NET/IB : No device found. [0] NCCL INFO NET/Socket : "
        "Using [0]eth0:10.0.0.9<0> [0] NCCL INFO Using network Socket"
    )
    assert "nccl-env-invalid" not in found
    fallback = found["socket-fallback"]
    assert fallback.severity == "warning" and "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1" in fallback.message


def test_a_ud_endpoint_timeout_of_ucx_names_the_gid_index():
    """UCX src/uct/ib/ud/base/ud_ep.c: ucs_fatal `UD endpoint %p to %s: unhandled timeout
    error` when nothing handles UCS_ERR_ENDPOINT_TIMEOUT."""
    found = _by_rule(
        "[n3:900:0:900]       ud_ep.c:296  Fatal: UD endpoint 0x1f00 to <no debug data>: "
        "unhandled timeout error"
    )
    assert "UCX_IB_GID_INDEX" in found["ucx-address-unreachable"].fix


def test_an_efa_registration_refused_with_einval_names_the_sync_memops_setting():
    """aws-ofi-nccl `Unable to register memory (type = %d) ...`; libfabric 1.18-1.19
    src/hmem_cuda.c returns -FI_EINVAL when cuPointerSetAttribute(SYNC_MEMOPS) fails."""
    found = _by_rule(
        "ip-10-1-2-3:77:90 [0] register_mr_buffers:544 NCCL WARN NET/OFI Unable to register "
        "memory (type = 2) for device 0. RC: -22, Error: Invalid argument"
    )
    assert "FI_EFA_SET_CUDA_SYNC_MEMOPS=0" in found["ib-memory-registration"].fix


def test_a_warning_of_nccls_ras_service_is_information_not_the_jobs_failure():
    """NCCL src/bootstrap.cc: "Continuing in spite of a RAS initialization error"; RAS's own
    client socket (src/ras/client_support.cc) fails aside from the job."""
    found = _by_rule(
        "gpu-4:81:99 [0] ras/client_support.cc:179 NCCL WARN Call to bind failed: Address "
        "already in use",
        "gpu-4:81:81 [0] NCCL INFO comm 0x5 rank 0 nranks 8 cudaDev 0 busId 1000 commId 0x9 - "
        "Init COMPLETE",
    )
    assert "nccl-bind-failed" not in found
    assert found["nccl-ras"].severity == "info"


def test_nccl_failing_to_open_its_shared_memory_segment_names_dev_shm():
    """NCCL src/os/linux.cc: SYSCHECKGOTO(fd = open(shmPath, ...), "open", ...)."""
    found = _by_rule(
        "gpu-4:81:99 [0] os/linux.cc:785 NCCL WARN Call to open failed: No space left on device"
    )
    assert "/dev/shm" in found["nccl-system-error"].fix


def test_deepspeeds_launcher_return_code_of_a_signalled_rank_is_read_as_the_signal():
    """DeepSpeed deepspeed/launcher/launch.py sigkill_handler: `{cmd} exits with return code =
    {returncode}`, Popen's code, negative for the signal that ended the rank (7: SIGBUS)."""
    line = (
        "[2024-03-02 10:00:01,001] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', "
        "'-u', 'train.py', '--local_rank=3'] exits with return code = {}"
    )
    assert "shm-exhausted" in _by_rule(line.format(-7))
    assert "shm-exhausted" not in _by_rule(line.format(1))


AGENT_SIGNAL_LOG = """\
W1207 02:13:32.976000 8098 torch/distributed/elastic/agent/server/api.py:753] Received \
{number} death signal, shutting down workers
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4193 closing signal {name}
torch.distributed.elastic.multiprocessing.api.SignalException: Process 4181 got signal: {number}
"""


@pytest.mark.parametrize(
    ("number", "name", "words"),
    [
        ("1", "SIGHUP", "the terminal, SSH or `kubectl exec` session that started it closed"),
        ("15", "SIGTERM", "its pod or job was stopped"),
        ("2", "SIGINT", "an interrupt"),
    ],
)
def test_the_signal_torchrun_got_says_who_stopped_it(trainops, tmp_path, number, name, words):
    """torch v2.13.0's elastic agent handles SIGTERM, SIGINT, SIGHUP and SIGQUIT itself and
    prints the signal's number; a SIGHUP is a closed terminal, not Kubernetes."""
    log = tmp_path / "torchrun.log"
    log.write_text(AGENT_SIGNAL_LOG.format(number=number, name=name))
    run = trainops("doctor", "nccl", "--format", "json", str(log))
    assert run.code == 1, run.err
    (found,) = [f for f in json.loads(run.out)["findings"] if f["rule"] == "rank-killed"]
    assert found["message"].startswith(f"torchrun got {name} and stopped its workers: {words}")
    if name == "SIGHUP":
        assert "nohup does not shield it" in found["message"] and "tmux" in found["fix"]
        # A hangup in a pod comes from the exec session that started torchrun.
        assert "rather than starting it from `kubectl exec`" in found["fix"]


EAFNOSUPPORT = "(errno: 97 - Address family not supported by protocol)."
C10D_IPV6 = (
    f"[W socket.cpp:401] [c10d] The server socket cannot be initialized on [::]:29500 "
    f"{EAFNOSUPPORT}\n"
    f"[W socket.cpp:558] [c10d] The client socket cannot be initialized to connect to "
    f"[localhost]:29500 {EAFNOSUPPORT}\n"
)


def test_an_errno_is_no_more_severe_than_the_message_that_carries_it(trainops, tmp_path):
    """c10d tries each address of the host in turn and warns on one it cannot use
    (socket.cpp's per-address tryListen/tryConnect): an IPv6 socket refused with
    EAFNOSUPPORT before IPv4 works is a warning, not the error the errno alone would be."""
    log = tmp_path / "c10d.log"
    log.write_text(C10D_IPV6)
    run = trainops("doctor", "nccl", "--format", "json", str(log))
    found = [
        f for f in json.loads(run.out)["findings"] if f["rule"] == "address-family-unsupported"
    ]
    assert found and {f["severity"] for f in found} == {"warning"}, found
