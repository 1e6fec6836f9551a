"""scripts/extract-doctor-messages.py on a real git repository with release tags: formats
read from C sources (concatenated literals, PRI macros, calls over several lines), the
newest release's line cited, and what people wrote kept on a refresh."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import yaml

from tests.support import REPO

SPEC = importlib.util.spec_from_file_location(
    "extract_doctor_messages", REPO / "scripts" / "extract-doctor-messages.py"
)
extract = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(extract)

FIRST = """#include "debug.h"
static int f(int n) {
  WARN("NET/IB : Got async event : %s", name);
  INFO(NCCL_INIT, "Using network %s", net);
  INFO(NCCL_INIT, "comm %p rank %d", comm, rank);
  return 0;
}
"""
SECOND = """#include "debug.h"
static int f(int n) {
  WARN("NET/IB : Got async event : %s", name);
  WARN("Call to ibv_reg_mr failed with error %s "
       "size %" PRIu64, strerror(errno),
       size);
  INFO(NCCL_INIT|NCCL_NET, "NET/Plugin: Failed to load %s, falling back", path);
  return 0;
}
"""


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_repo(tmp_path):
    repo = tmp_path / "nccl"
    (repo / "src" / "transport").mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    source = repo / "src" / "transport" / "net_ib.cc"
    for text, tag in ((FIRST, "v2.18.1-1"), (SECOND, "v2.19.3-1")):
        source.write_text(text)
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", tag)
        git(repo, "tag", tag)
    return repo


def test_formats_come_from_every_release_with_the_newest_line(tmp_path):
    rows = {(r["level"], r["format"]): r for r in extract.extract(make_repo(tmp_path), "nccl")}
    async_event = rows[("WARN", "NET/IB : Got async event : %s")]
    assert (async_event["first"], async_event["last"]) == ("v2.18.1-1", "v2.19.3-1")
    assert async_event["source"].endswith("/blob/v2.19.3-1/src/transport/net_ib.cc#L3")
    assert ("WARN", "Call to ibv_reg_mr failed with error %s size %lu") in rows
    assert ("INFO", "NET/Plugin: Failed to load %s, falling back") in rows
    assert ("INFO", "Using network %s") in rows  # a decision: user-facing
    assert ("INFO", "comm %p rank %d") not in rows  # detail the parsers read without it
    assert rows[("INFO", "Using network %s")]["last"] == "v2.18.1-1"


def test_a_refresh_keeps_what_people_wrote_and_marks_new_formats(tmp_path):
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    written = {
        "key": "NET/IB : Got async event : %s",
        "level": "WARN",
        "source": "old",
        "finding": "ib-async-event",
        "severity": "warning",
        "meaning": "The RDMA device reported an event.",
    }
    (catalog / "nccl.yaml").write_text("# head\n" + yaml.safe_dump([written]))
    repo = make_repo(tmp_path)
    script = REPO / "scripts" / "extract-doctor-messages.py"
    args = [
        sys.executable,
        str(script),
        str(repo),
        "--component",
        "nccl",
        "--catalog",
        str(catalog),
    ]
    subprocess.run(args, check=True, capture_output=True)
    text = (catalog / "nccl.yaml").read_text()
    entries = {e["key"]: e for e in yaml.safe_load(text)}
    kept = entries["NET/IB : Got async event : %s"]
    assert text.startswith("# head\n")
    assert (kept["finding"], kept["severity"]) == ("ib-async-event", "warning")
    assert kept["source"].endswith("#L3")
    assert entries["Call to ibv_reg_mr failed with error %s size %lu"]["severity"] == "unclassified"
    subprocess.run(args, check=True, capture_output=True)
    assert (catalog / "nccl.yaml").read_text() == text  # a second run changes nothing


def test_a_directory_that_is_not_a_clone_is_refused(tmp_path):
    script = REPO / "scripts" / "extract-doctor-messages.py"
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--component", "nccl"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "not a git clone" in run.stderr and "Traceback" not in run.stderr


def test_a_format_the_windows_port_also_prints_cites_the_file_every_platform_builds(tmp_path):
    repo = make_repo(tmp_path)
    (repo / "src" / "os").mkdir()
    for name in ("linux.cc", "windows.cc"):
        (repo / "src" / "os" / name).write_text('void f() {\n  WARN("Accept failed: %s", e);\n}\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "os")
    git(repo, "tag", "v2.20.3-1")
    rows = {r["format"]: r for r in extract.extract(repo, "nccl")}
    assert "/src/os/linux.cc#L2" in rows["Accept failed: %s"]["source"]


def test_a_refresh_keeps_the_entries_written_for_a_macros_message(tmp_path):
    """SYSCHECK's `"Call to " name " failed: %s"` has no format string to extract: the entry
    written by hand (`expanded: true`) survives a refresh; one without the mark does not."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    expanded = {
        "key": "Call to bind failed: %s",
        "level": "WARN",
        "expanded": True,
        "source": "https://github.com/NVIDIA/nccl/blob/v2.19.3-1/src/misc/socket.cc#L9",
        "finding": "nccl-bind-failed",
        "severity": "error",
        "meaning": "bind failed.",
    }
    stale = {**expanded, "key": "Call to listen failed: %s", "expanded": False}
    (catalog / "nccl.yaml").write_text(yaml.safe_dump([expanded, stale]))
    script = REPO / "scripts" / "extract-doctor-messages.py"
    args = [sys.executable, str(script), str(make_repo(tmp_path)), "--component", "nccl"]
    subprocess.run([*args, "--catalog", str(catalog)], check=True, capture_output=True)
    keys = {e["key"]: e for e in yaml.safe_load((catalog / "nccl.yaml").read_text())}
    assert keys["Call to bind failed: %s"]["finding"] == "nccl-bind-failed"
    assert "Call to listen failed: %s" not in keys
    assert "NET/IB : Got async event : %s" in keys


CHECKS_H = """#define SYSCHECK(statement, name) do { \\\\
  int retval; \\\\
  if (retval == -1) { \\\\
    WARN("Call to " name " failed: %s", strerror(errno)); \\\\
    return ncclSystemError; \\\\
  } \\\\
} while (false)
#define CUDACHECK(cmd) do { WARN("Cuda failure '%s'", e); } while (0)
"""
SOCKET_CC = """#include "checks.h"
ncclResult_t listenOn(int fd) {
  SYSCHECK(bind(fd, &addr.sa,
                salen), "bind");
  SYSCHECK(listen(fd, 16384), name);
  return ncclSuccess;
}
"""


def test_a_checking_macro_that_prints_its_calls_name_is_expanded_at_each_use(tmp_path):
    """NCCL include/checks.h: SYSCHECK(statement, name) warns `"Call to " name " failed: %s"`;
    a use whose name is a literal is a format of the file that uses it."""
    repo = make_repo(tmp_path)
    (repo / "src" / "include").mkdir()
    (repo / "src" / "include" / "checks.h").write_text(CHECKS_H.replace("\\\\", "\\"))
    (repo / "src" / "misc").mkdir()
    (repo / "src" / "misc" / "socket.cc").write_text(SOCKET_CC)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "checks")
    git(repo, "tag", "v2.23.4-1")
    rows = {(r["level"], r["format"]): r for r in extract.extract(repo, "nccl")}
    bind = rows[("WARN", "Call to bind failed: %s")]
    assert bind["source"].endswith("/blob/v2.23.4-1/src/misc/socket.cc#L3")
    assert not any("listen" in fmt or " name " in fmt for _, fmt in rows)


def test_the_ras_service_is_cited_only_for_what_only_it_prints(tmp_path):
    repo = make_repo(tmp_path)
    (repo / "src" / "ras").mkdir()
    (repo / "src" / "misc").mkdir()
    for path in ("src/ras/client.cc", "src/misc/socket.cc"):
        (repo / path).write_text('void f() {\n  WARN("Accept failed: %s", e);\n}\n')
    (repo / "src" / "ras" / "only.cc").write_text('void g() {\n  WARN("RAS only: %s", e);\n}\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "ras")
    git(repo, "tag", "v2.24.3-1")
    rows = {r["format"]: r for r in extract.extract(repo, "nccl")}
    assert "/src/misc/socket.cc#L2" in rows["Accept failed: %s"]["source"]
    assert "/src/ras/only.cc#L2" in rows["RAS only: %s"]["source"]


NVMLWRAP = """#include "nvmlwrap.h"
#define NVMLCHECK(name, ...) do { \\
  nvmlReturn_t e44241808 = pfn_##name(__VA_ARGS__); \\
  if (e44241808 != NVML_SUCCESS) { \\
    WARN(#name "() failed: %s", pfn_nvmlErrorString(e44241808)); \\
    return ncclSystemError; \\
  } \\
} while(0)
ncclResult_t ncclNvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  NVMLCHECK(nvmlDeviceGetHandleByPciBusId, pciBusId, device);
  return ncclSuccess;
}
"""


def test_a_checking_macro_a_source_file_defines_is_expanded_at_each_use(tmp_path):
    """NCCL's nvmlwrap.cc warns through its own NVMLCHECK, which stringifies the call's name
    (`#name "() failed: %s"`): each use is a format of its own."""
    repo = make_repo(tmp_path)
    (repo / "src" / "misc").mkdir()
    (repo / "src" / "misc" / "nvmlwrap.cc").write_text(NVMLWRAP)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "nvml")
    git(repo, "tag", "v2.20.3-1")
    rows = {(r["level"], r["format"]): r for r in extract.extract(repo, "nccl")}
    found = rows[("WARN", "nvmlDeviceGetHandleByPciBusId() failed: %s")]
    assert found["source"].endswith("/blob/v2.20.3-1/src/misc/nvmlwrap.cc#L10")
    assert not any("#name" in fmt or fmt.startswith("() failed") for _, fmt in rows)
