"""The doctor's message catalog: every message, printed as its component prints it, is
recognised; every entry is sourced, classified and documented."""

from __future__ import annotations

import re

import pytest

from tests.support import REPO
from trainops.doctor import analysis, catalog, parse
from trainops.doctor import events as ev
from trainops.doctor.expectation import Expectation
from trainops.doctor.lines import clean, nccl_header
from trainops.doctor.sources import memory_stream
from trainops.rules import DOCTOR
from trainops.rules import catalog as rules

# A value for each printf conversion, as a real log would show it.
_VALUES = {
    "d": "3",
    "i": "3",
    "u": "7",
    "o": "7",
    "x": "1f",
    "X": "1F",
    "e": "1.5",
    "f": "1.5",
    "g": "1.5",
    "a": "1",
    "c": "z",
    "s": "mlx5_0",
    "p": "0x7f3a10",
    "n": "",
}
_CONVERSION = re.compile(
    r"%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L|q)?([diouxXeEfgGaAcspn%])"
)


def printed(fmt: str) -> str:
    return _CONVERSION.sub(lambda m: "%" if m.group(1) == "%" else _VALUES[m.group(1)], fmt)


def as_nccl_prints(entry: catalog.Entry, style: int) -> str:
    """The whole line, in the header forms NCCL 2.18-2.30 and its plugins use."""
    message = " ".join(printed(entry.key).split())
    if entry.level == "INFO":
        return f"node-3:4211:4388 [5] NCCL INFO {message}"
    if style == 0:  # 2.18-2.27: file:line before the level
        return f"node-3:4211:4388 [5] transport/net_ib.cc:1295 NCCL WARN {message}"
    return f"node-3:4211:4388 [5] misc/socket.cc:601 (ncclSocketConnect) NCCL WARN {message}"


def _same_text(a: catalog.Entry, b: catalog.Entry) -> bool:
    """Two entries whose texts both match what `a` prints cannot be told apart by a reader
    (the same format at two places, or a CUDA error's string inside torch's message)."""
    text = " ".join(printed(a.key).split())
    return any(
        catalog.compile_format(fmt, within)[0].search(text) is not None
        for fmt, within in catalog.formats_of(b)
    )


LINE_ENTRIES = [e for e in catalog.entries() if e.component in ("nccl", "aws-ofi-nccl")]


@pytest.mark.parametrize("style", [0, 1], ids=["file-line", "file-line-function"])
def test_every_nccl_and_plugin_message_printed_with_its_header_is_recognised(style):
    missed = []
    for entry in LINE_ENTRIES:
        if entry in catalog.index().unanchored:
            continue
        line = clean(as_nccl_prints(entry, style))
        header = nccl_header(line.text)
        assert header is not None and header.level == entry.level, line.text
        assert header.host == "node-3" and header.device == 5, line.text
        found = catalog.lookup(header.message)
        if found is None or (found != entry and not _same_text(entry, found)):
            missed.append((entry.key, found and found.key))
    assert not missed, missed[:10]


def test_a_pasted_message_without_its_header_is_recognised():
    missed = [
        e.key
        for e in LINE_ENTRIES
        if e not in catalog.index().unanchored and catalog.lookup("> " + printed(e.key)) is None
    ]
    assert not missed, missed[:10]


UCX_ENTRIES = [e for e in catalog.entries() if e.component == "ucx"]


def as_ucx_prints(entry: catalog.Entry) -> str:
    """The whole line in UCX's log format (src/ucs/debug/log.c, UCS_LOG_FMT)."""
    message = " ".join(printed(entry.key).split())
    return (
        f"[1733131415.123456] [node-3:4211:0]        ib_iface.c:1377 UCX  {entry.level} {message}"
    )


def test_every_ucx_message_printed_with_its_header_is_recognised():
    assert len(UCX_ENTRIES) >= 15
    missed = []
    for entry in UCX_ENTRIES:
        for line in (as_ucx_prints(entry), "> " + printed(entry.key)):
            found = catalog.lookup(clean(line).text)
            if found is None or (found != entry and not _same_text(entry, found)):
                missed.append((line, found and found.key))
    assert not missed, missed[:10]


def test_only_formats_without_fixed_words_are_unanchored():
    for entry in catalog.index().unanchored:
        words = [w for w in _CONVERSION.sub(" ", entry.key).split() if len(w) >= 3]
        assert len("".join(words)) < 6, entry.key


def test_every_entry_is_sourced_at_a_release_and_classified():
    known = set(rules())
    for entry in catalog.entries():
        assert entry.severity in catalog.SEVERITIES, entry
        assert entry.meaning.strip(), entry
        assert re.match(r"https://", entry.source), entry
        if entry.component in ("nccl", "aws-ofi-nccl", "ucx", "torch", "errno"):
            assert re.search(r"/blob/(v[\d.]+[-\w]*|[0-9a-f]{40})/", entry.source), entry
        if entry.reported:
            assert entry.finding in known and rules()[entry.finding].category == DOCTOR, entry


def test_the_catalog_covers_both_components_across_the_supported_releases():
    nccl = [e for e in catalog.entries() if e.component == "nccl"]
    warns = [e for e in nccl if e.level == "WARN"]
    assert len(warns) >= 800
    firsts = {e.first for e in nccl}
    lasts = {e.last for e in nccl}
    assert "v2.18.1-1" in firsts and "v2.30.7-1" in lasts
    assert sum(1 for e in catalog.entries() if e.component == "aws-ofi-nccl") >= 700


def test_a_catalogued_warning_names_its_finding_with_meaning_and_source(trainops, tmp_path):
    """A message only the catalog knows: NCCL's IB async port error, then an error trail."""
    log = tmp_path / "rank3.log"
    log.write_text(
        "node-3:4211:4388 [5] NCCL INFO comm 0x1 rank 3 nranks 8 cudaDev 5 busId 1000 - "
        "Init START\n"
        "node-3:4211:4390 [5] transport/net_ib.cc:92 NCCL WARN NET/IB : mlx5_2:1 Got async "
        "event : port error\n"
        "node-3:4211:4388 [5] NCCL INFO transport/net_ib.cc:1108 -> 6\n"
    )
    entry = catalog.lookup("NET/IB : mlx5_2:1 Got async event : port error")
    assert entry is not None and entry.finding == "ib-async-event"
    run = trainops("doctor", "nccl", str(log))
    assert run.code == 1 and "no problems found" not in run.out
    assert "[ib-async-event]" in run.out and entry.source in run.out


def test_catalogued_lines_become_events_only_where_no_parser_understood_them():
    lines = [
        "h:1:2 [0] NCCL INFO NET/IB : No device found.",
        "h:1:2 [0] transport/net_ib.cc:92 NCCL WARN NET/IB : mlx5_2:1 Got async event : port error",
        "h:1:2 [0] misc/strongstream.cc:1 NCCL WARN Cuda failure 'invalid argument'",
    ]
    events = parse.parse([memory_stream("log", lines)])
    catalogued = {e.line for e in events if e.kind == ev.CATALOGUED}
    skipped = parse._UNEXPLAINED | {ev.CATALOGUED}
    understood = {e.line for e in events if e.kind not in skipped}
    assert catalogued == {2} and understood == {1, 3}


def test_families_are_documented_in_the_runbook_and_the_catalog_page():
    runbook = (REPO / "docs" / "runbook.md").read_text()
    page = (REPO / "docs" / "doctor-messages.md").read_text()
    for family in catalog.families():
        assert f"| `{family}` |" in runbook
        assert f"`{family}`" in page


def test_every_torch_and_open_mpi_message_as_printed_is_recognised():
    missed = []
    for entry in (e for e in catalog.entries() if e.component in ("torch", "openmpi")):
        if entry in catalog.index().unanchored:
            continue
        line = "[rank3]:[E1201 10:00:00.123 ProcessGroupNCCL.cpp:1] " + printed(entry.key)
        found = catalog.lookup(clean(line).text)
        if found is None or (found != entry and not _same_text(entry, found)):
            missed.append((entry.key, found and found.key))
    assert not missed, missed[:10]


def test_every_cuda_error_is_recognised_by_name_and_by_its_string_after_cuda():
    for entry in (e for e in catalog.entries() if e.component == "cuda"):
        assert catalog.cuda_error(entry.key) is not None
        by_name = catalog.lookup(f"CUDA driver call failed: {entry.key}")
        assert by_name is not None and by_name.key == entry.key, entry.key
        if entry.text:
            found = catalog.lookup(f"RuntimeError: CUDA error: {entry.text}")
            assert found is not None and found.component in ("cuda", "torch"), entry.text


def test_a_cuda_string_without_cuda_on_the_line_is_not_a_cuda_error():
    assert catalog.lookup("ValueError: invalid argument for --lr") is None


@pytest.mark.parametrize(
    "line",
    [
        "I try to run finetune_task.sh on a 4xA100 40G and I get CUDA out of memory",
        "With torch 2.1 CUDA reports an illegal memory access was encountered sometimes",
    ],
)
def test_a_sentence_that_names_cuda_and_an_error_string_is_not_a_cuda_error(line):
    # A caller prints the string after a colon or a quote; a reporter's sentence does not.
    assert catalog.lookup(line) is None


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: out of memory",
        "CUDA driver error: out of memory",
        "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=47 error=2 : "
        "out of memory",
        "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR (cudaMalloc(&p, n)=out of memory)",
    ],
)
def test_a_cuda_string_as_callers_print_it_is_still_read(line):
    found = catalog.lookup(line)
    assert found is not None and found.finding == "nccl-out-of-memory", found


def test_every_xid_of_the_table_is_decoded():
    xids = [e for e in catalog.entries() if e.component == "xid"]
    assert len(xids) >= 100 and catalog.xid(79).finding == "gpu-fault"
    assert {catalog.xid(code).finding for code in (74, 144, 145)} == {"nvswitch-fabric"}


def test_a_specific_catalogued_error_is_said_beside_a_generic_check_finding():
    """NCCL's own three-line NVLS warning names the fabric manager; the CUDA error it
    carries is a cuda-fatal finding of the checks, and the catalog adds what NCCL said."""
    lines = [
        "h:7:9 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1000 - Init START",
        "h:7:9 [0] transport/nvls.cc:167 NCCL WARN Failed to bind NVLink SHARP (NVLS) "
        "Multicast memory of size 1073741824 : CUDA error 801 'operation not supported'.",
        "This is usually caused by a system or configuration error in the Fabric Manager or "
        "NVSwitches.",
        "Do not force-enable NVLS (NCCL_NVLS_ENABLE=1) if you wish to avoid this error in the "
        "future.",
        "h:7:9 [0] NCCL INFO transport/nvls.cc:170 -> 1",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    diagnosis = analysis.diagnose([memory_stream("log", lines)], Expectation())
    said = {f.rule for f in diagnosis.findings}
    assert {"cuda-fatal", "nvswitch-fabric"} <= said


def test_an_errno_text_inside_another_message_names_the_cause():
    lines = [
        "h:7:9 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1000 - Init START",
        "h:7:9 [0] misc/socket.cc:458 NCCL WARN socketTryAccept: Accept failed: Too many open "
        "files",
        "h:7:9 [0] NCCL INFO misc/socket.cc:470 -> 2",
    ]
    diagnosis = analysis.diagnose([memory_stream("log", lines)], Expectation())
    [finding] = [f for f in diagnosis.findings if f.rule == "open-files-limit"]
    assert "Too many open files" in finding.message and "ulimit" in finding.fix


def test_ipv6_refused_by_the_kernel_is_named_beside_the_store_failure():
    line = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to "
        "[node-0]:29500 (errno: 97 - Address family not supported by protocol)."
    )
    diagnosis = analysis.diagnose([memory_stream("log", [f"[rank1]:{line}"])], Expectation())
    said = {f.rule for f in diagnosis.findings}
    assert {"rendezvous-unreachable", "address-family-unsupported"} <= said


def test_an_errno_text_on_a_line_of_no_stack_is_not_a_finding():
    assert catalog.errno_in("tar: Too many open files") is not None
    diagnosis = analysis.diagnose(
        [memory_stream("log", ["node ready", "comm 0x1 rank 0 nranks 1 - Destroy COMPLETE"])],
        Expectation(),
    )
    assert not any(f.rule == "open-files-limit" for f in diagnosis.findings)


def test_a_long_message_cut_after_its_first_sentence_is_recognised():
    line = (
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
        "Please update your GPU dri"
    )
    entry = catalog.lookup(line)
    assert entry is not None and entry.finding == "cuda-driver-too-old"


def test_cuda_errors_the_catalog_attributes_name_their_cause_not_a_generic_cuda_error():
    lines = [
        "[rank9]: RuntimeError: CUDA error: invalid device ordinal",
        "[rank3]: RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    diagnosis = analysis.diagnose([memory_stream("log", lines)], Expectation())
    by_rule = {f.rule: f for f in diagnosis.findings}
    assert by_rule["launch-config-invalid"].ranks == [9]
    assert "exclusive" in by_rule["duplicate-gpu"].message
    assert by_rule["cuda-fatal"].ranks == [1]


RESULT_ENTRIES = [e for e in catalog.entries() if e.component == "nccl-result"]


@pytest.mark.parametrize(
    "form",
    [
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, {} (run with NCCL_DEBUG=INFO "
        "for details), NCCL version 2.21.5",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, {}, NCCL version 2.7.8",
        "node-1: Test NCCL failure common.cu:303 '{}'",
        "RuntimeError: NCCL Error 2: {}",
    ],
    ids=["torch", "torch-old-nccl", "nccl-tests", "horovod"],
)
def test_every_nccl_result_string_is_recognised_as_its_callers_print_it(form):
    assert len(RESULT_ENTRIES) >= 4
    for entry in RESULT_ENTRIES:
        found = catalog.lookup(form.format(entry.key))
        assert found is not None and found.finding == entry.finding, (entry.key, found)


def test_a_result_string_is_read_only_after_nccl():
    assert catalog.lookup("ValueError: internal error while parsing the config") is None


FORMER = [
    (e, fmt) for e in catalog.entries() if e.component not in ("cuda", "xid") for fmt in e.former
]


def test_earlier_wordings_are_sourced_at_the_release_that_printed_them():
    assert FORMER, "the catalog carries no earlier wording"
    for entry, _ in FORMER:
        assert re.search(r"/blob/v[\d.]+[-\w]*/", entry.former_source), entry


@pytest.mark.parametrize(
    "entry, fmt", FORMER, ids=[f"{e.component}:{fmt[:40]}" for e, fmt in FORMER]
)
def test_an_earlier_wording_names_the_message_and_the_source_that_printed_it(entry, fmt):
    found = catalog.lookup(clean("RuntimeError: " + printed(fmt)).text)
    assert found is not None and found.key == entry.key, (fmt, found and found.key)
    assert found.source == entry.former_source


@pytest.mark.parametrize(
    "lines",
    [
        [
            "[W reducer.cpp:1303] Warning: find_unused_parameters=True was specified in DDP "
            "constructor, but did not find any unused parameters in the forward pass. This flag "
            "results in an extra traversal of the autograd graph every iteration,  which can "
            "adversely affect performance. (function operator())"
        ],
        # torch 1.x, as a terminal wraps it
        [
            "[W reducer.cpp:1050] Warning: find_unused_parameters=True was specified in DDP "
            "constructor, but did not find any unused parameters. This flag results in an",
            "extra traversal of the autograd graph every iteration, which can adversely affect",
        ],
    ],
    ids=["torch-2", "torch-1"],
)
def test_ddps_unused_parameters_hint_is_read_as_a_working_ddp_not_refused(lines):
    # A log that holds only this hint holds PyTorch distributed output: the doctor reads it
    # (no refusal), finds no failure, and says nothing shows the job finished.
    findings = analysis.diagnose([memory_stream("log", lines)], Expectation()).findings
    assert {f.rule for f in findings} == {"outcome-unproven"}
    assert all(f.severity == "warning" for f in findings)


@pytest.mark.parametrize(
    "line",
    [
        "timed out initializing process group in store based barrier on rank",
        "`Timed out initializing process group in store based barrier on rank`",
        "RuntimeError: Timed out initializing process group in store based barrier on",
    ],
)
def test_a_line_cut_inside_a_long_messages_opening_names_the_message(line):
    found = catalog.lookup(clean(line).text)
    assert found is not None and found.finding == "store-timeout", found


@pytest.mark.parametrize(
    "line, finding",
    [
        # fewer than CUT characters of the opening: too little to name it
        ("Timed out initializing process group", "store-timeout"),
        # the opening goes on with other words: another sentence, not a cut message
        (
            "Timed out initializing process group in store based barrier on rank zero again",
            "store-timeout",
        ),
        # a short message lower-cased is prose (UCX's "failed to open interface" is not
        # NCCL's GDRCopy "Failed to open %s")
        ("#   < failed to open interface >", "nccl-feature-disabled"),
    ],
)
def test_a_short_or_diverging_opening_names_no_message(line, finding):
    found = catalog.lookup(clean(line).text)
    assert found is None or found.finding != finding, found.key


def test_a_failed_device_side_assertion_names_the_kernels_input_not_the_node():
    line = (
        '"../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [44,0,0], '
        'thread: [70,0,0] Assertion `index >= -sizes[i] && index < sizes[i] && "index out of '
        'bounds"` failed." error'
    )
    found = catalog.lookup(clean(line).text)
    assert found is not None and found.finding == "kernel-assert"
    findings = analysis.diagnose([memory_stream("log", [line])], Expectation()).findings
    by_rule = {f.rule: f for f in findings}
    assert by_rule["kernel-assert"].severity == "error"
    assert "failure-unrecognised" not in by_rule and "gpu-fault" not in by_rule
