"""Validate at the scale of a real platform repository (`make bench`, section `scale`).

- Throughput: whole-process `trainops validate` of one file of 10,000 Deployments on
  one core (taskset -c 0), policies on, and the share the policy pack adds.
- Growth: 100,000 resources (ten such files) against 10,000, on one core.
- Every kind the pack reads: the policy pass (in process, CPU time) over copies of every
  rule's fixtures (tests/scale.py's `every_fixture_render`) at about 10,000 and 100,000
  resources; linear rules make the second about ten times the first.
- The same files as a run's (below a runs/ directory), where the run rules see every
  object and each Deployment is an error: against the platform's time, and 100,000
  against 10,000.
- A synthetic platform repository (tests/bench/platform_repo.py: N clusters with M runs
  each, written by the profile generators), cold and unchanged, against the peer
  pipeline (`kubectl kustomize DIR | kubernetes-validate --strict -`, one kustomization
  at a time), and `-j 2` against `-j 1`. The peer is slow (about a second per
  kustomization), so it runs on every tenth cluster with all its runs and its time is
  scaled to the whole repository; the report says so.

Every figure is a ratio between commands timed in the same run; peak RSS is the
largest resident set of the command's process tree (GNU time's %M equivalent, from
wait4).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench import user_env
from tests.bench.platform_repo import build, kustomizations
from tests.bench.validate_bench import K8S_VERSION, VENV_BIN
from tests.scale import every_fixture_render
from tests.support import REPO
from trainops.model import Document, Target
from trainops.policy import Context
from trainops.policy.engine import evaluate
from trainops.policy.settings import PolicySettings, load_pack

PEER_EVERY = 10  # the peer runs on one cluster in this many


def deployments(count: int, offset: int = 0) -> str:
    docs = []
    for i in range(offset, offset + count):
        docs.append(
            f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{i}
  namespace: ns-{i % 50}
  labels: {{app: app-{i}}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: app-{i}}}
  template:
    metadata:
      labels: {{app: app-{i}}}
    spec:
      containers:
      - name: web
        image: registry.example.com/web:1.{i}.0
        ports:
        - containerPort: 8080
        resources:
          requests: {{cpu: 100m, memory: 128Mi}}
          limits: {{cpu: "1", memory: 256Mi}}
"""
        )
    return "---\n".join(docs)


def timed(command: list[str], cwd: Path, env: dict | None = None) -> tuple[float, int, int]:
    """(seconds, exit code, peak RSS in MiB) of one command."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env={**user_env(), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return seconds, process.returncode, usage.ru_maxrss // 1024


def trainops(*args: str, one_core: bool = False) -> list[str]:
    command = [str(VENV_BIN / "trainops"), "validate", *args]
    return ["taskset", "-c", "0", *command] if one_core and shutil.which("taskset") else command


def run(clusters: int, runs: int) -> dict:
    results = {"throughput": _throughput(), "every_kind": _every_kind()}
    results["platform_repository"] = _platform_repository(clusters, runs)
    return {"scale": results}


def _throughput() -> dict:
    work = Path(tempfile.mkdtemp(prefix="trainops-scale-"))
    try:
        files = []
        in_run = []  # the same files as a run's (overlays/lab/runs/big/): run rules apply
        run_dir = work / "overlays" / "lab" / "runs" / "big"
        run_dir.mkdir(parents=True)
        for index in range(10):
            path = work / f"deployments-{index}.yaml"
            path.write_text(deployments(10_000, offset=index * 10_000))
            files.append(str(path))
            shutil.copy(path, run_dir / path.name)
            in_run.append(str(run_dir / path.name))
        best: dict[str, float] = {}
        rss: dict[str, int] = {}
        cases = {
            "10k": trainops(files[0], "--no-cache", "-q", one_core=True),
            "10k_no_policies": trainops(
                files[0], "--no-cache", "-q", "--no-policies", one_core=True
            ),
            "100k": trainops(*files, "--no-cache", "-q", "-j", "1", one_core=True),
            # Every Deployment in a run is a run-kind-synced error: exit 1.
            "10k_in_a_run": trainops(in_run[0], "--no-cache", "-q", one_core=True),
            "100k_in_a_run": trainops(*in_run, "--no-cache", "-q", "-j", "1", one_core=True),
        }
        for round_ in range(3):  # alternate, keep the best of three
            for label, command in cases.items():
                if label.startswith("100k") and round_ == 2:
                    continue  # best of two for the long ones
                seconds, code, peak = timed(command, REPO)
                assert code == (1 if label.endswith("in_a_run") else 0), f"{label}: exit {code}"
                best[label] = min(best.get(label, seconds), seconds)
                rss[label] = max(rss.get(label, 0), peak)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {
        "resources_per_s_10k_one_core": round(10_000 / best["10k"]),
        "seconds_10k": round(best["10k"], 2),
        "seconds_10k_no_policies": round(best["10k_no_policies"], 2),
        "policy_overhead_percent": round(
            (best["10k"] - best["10k_no_policies"]) / best["10k_no_policies"] * 100, 1
        ),
        "seconds_100k": round(best["100k"], 2),
        "growth_100k_over_10k": round(best["100k"] / best["10k"], 1),
        "peak_rss_mib_10k": rss["10k"],
        "peak_rss_mib_100k": rss["100k"],
        "seconds_10k_in_a_run": round(best["10k_in_a_run"], 2),
        "run_over_platform_10k": round(best["10k_in_a_run"] / best["10k"], 2),
        "growth_100k_over_10k_in_a_run": round(best["100k_in_a_run"] / best["10k_in_a_run"], 1),
    }
    print("\n== validate throughput, whole process on one core (taskset -c 0)")
    print(
        f"  10,000 Deployments:       {best['10k']:6.2f} s  "
        f"{figures['resources_per_s_10k_one_core']:6d}/s  peak {rss['10k']} MiB"
    )
    print(
        f"  same, --no-policies:      {best['10k_no_policies']:6.2f} s  "
        f"policies add {figures['policy_overhead_percent']:+.1f}%"
    )
    print(
        f"  100,000 (ten files):      {best['100k']:6.2f} s  "
        f"{figures['growth_100k_over_10k']}x the time of 10,000  peak {rss['100k']} MiB"
    )
    print(
        f"  10,000 in a run (errors):  {best['10k_in_a_run']:6.2f} s  "
        f"{figures['run_over_platform_10k']}x the platform's; 100,000: "
        f"{figures['growth_100k_over_10k_in_a_run']}x the time of 10,000"
    )
    return figures


def _every_kind() -> dict:
    load_pack(REPO / "policies")
    seconds, sizes = {}, {}
    for label, copies in (("10k", 3), ("100k", 30)):
        documents = [Document(obj=o, source="fixture.yaml") for o in every_fixture_render(copies)]
        start = time.process_time()
        evaluate(Context(Target("file", "fixture.yaml"), documents), PolicySettings())
        seconds[label], sizes[label] = time.process_time() - start, len(documents)
    figures = {
        "resources_10k": sizes["10k"],
        "resources_100k": sizes["100k"],
        "policy_seconds_10k": round(seconds["10k"], 2),
        "policy_seconds_100k": round(seconds["100k"], 2),
        "growth_100k_over_10k": round(seconds["100k"] / seconds["10k"], 1),
        "size_ratio": round(sizes["100k"] / sizes["10k"], 1),
    }
    print("\n== the policy pass over every kind the pack reads (copies of every fixture)")
    print(
        f"  {sizes['10k']:,} resources: {seconds['10k']:6.2f} s CPU; {sizes['100k']:,}: "
        f"{seconds['100k']:6.2f} s, {figures['growth_100k_over_10k']}x the time for "
        f"{figures['size_ratio']}x the resources"
    )
    return figures


def _platform_repository(clusters: int, runs: int) -> dict:
    root = build(clusters, runs)
    cache = Path(tempfile.mkdtemp(prefix="trainops-scale-cache-"))
    try:
        dirs = kustomizations(root)
        sample = [
            d
            for d in dirs
            if int(d.relative_to(root / "overlays").parts[0].split("-")[1]) % PEER_EVERY == 0
        ]
        peer_start = time.perf_counter()
        for directory in sample:
            command = (
                f"kubectl kustomize {directory} | {VENV_BIN / 'kubernetes-validate'} --strict "
                f"--kubernetes-version {K8S_VERSION} --quiet --no-warn -"
            )
            subprocess.run(command, shell=True, capture_output=True, check=False)
        peer_sample = time.perf_counter() - peer_start
        peer = peer_sample * len(dirs) / len(sample)
        env = {"TRAINOPS_CACHE_DIR": str(cache)}
        figures: dict = {
            "clusters": clusters,
            "runs_per_cluster": runs,
            "kustomizations": len(dirs),
        }
        for jobs in ("1", "2"):
            shutil.rmtree(cache, ignore_errors=True)
            seconds, code, peak = timed(trainops("overlays", "-q", "-j", jobs), root, env)
            assert code == 0, f"validate -j {jobs}: exit {code}"
            figures[f"cold_j{jobs}_s"] = round(seconds, 1)
            figures[f"cold_j{jobs}_peak_rss_mib"] = peak
        warm, code, warm_peak = timed(trainops("overlays", "-q", "-j", "2"), root, env)
        assert code == 0
        figures.update(
            {
                "warm_s": round(warm, 2),
                "warm_peak_rss_mib": warm_peak,
                "peer_sample_kustomizations": len(sample),
                "peer_estimated_s": round(peer, 1),
                "cold_speedup_vs_peer": round(peer / figures["cold_j2_s"], 1),
                "warm_speedup_vs_peer": round(peer / warm, 1),
                "j2_speedup_over_j1": round(figures["cold_j1_s"] / figures["cold_j2_s"], 2),
            }
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    print(
        f"\n== a platform repository: {clusters} clusters x {runs} runs "
        f"({len(dirs)} kustomizations)"
    )
    print(
        f"  peer, one kustomization at a time: {peer:7.1f} s (measured on {len(sample)}, "
        "scaled to all)"
    )
    for jobs in ("1", "2"):
        print(
            f"  trainops validate -j {jobs}, empty cache: {figures[f'cold_j{jobs}_s']:7.1f} s  "
            f"peak {figures[f'cold_j{jobs}_peak_rss_mib']} MiB"
        )
    print(
        f"  trainops validate, nothing changed:  {warm:7.2f} s  peak {warm_peak} MiB\n"
        f"  cold {figures['cold_speedup_vs_peer']}x, unchanged "
        f"{figures['warm_speedup_vs_peer']}x faster than the peer; -j 2 is "
        f"{figures['j2_speedup_over_j1']}x -j 1"
    )
    return figures


if __name__ == "__main__":  # python -m tests.bench.scale_bench CLUSTERS RUNS
    print(run(int(sys.argv[1]), int(sys.argv[2])))
