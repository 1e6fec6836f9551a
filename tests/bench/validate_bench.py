"""`trainops validate` against the peer pipeline, and schema-check throughput.

The workspace is the repository's own overlays, each cluster copied several
times, with the pinned remote bases pointed at the offline mirror so that the
peer (`kubectl kustomize DIR | kubernetes-validate --strict -`, once per
overlay) renders exactly the same input without network.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from tests.support import REPO

VENV_BIN = Path(sys.executable).parent
K8S_VERSION = "1.35"


def build_workspace(copies: int) -> Path:
    work = Path(tempfile.mkdtemp(prefix="trainops-bench-"))
    for name in ("base", "schemas", "policies"):
        shutil.copytree(REPO / name, work / name)
    shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")
    for cluster in sorted((REPO / "overlays").iterdir()):
        for index in range(copies):
            copy = work / "overlays" / f"{cluster.name}-{index}"
            shutil.copytree(cluster, copy)
            # Distinct content per copy: the content-keyed cache must not treat
            # the copies as one overlay rendered many times.
            for path in copy.rglob("*.yaml"):
                path.write_text(path.read_text() + f"# bench copy {index}\n")
    point_remotes_at_mirror(work)
    return work


def point_remotes_at_mirror(work: Path) -> None:
    """Replace the Training Operator's and Multus's remote bases with local copies of
    the mirror's, so that the peer (plain kustomize, no network) renders them too.

    The copies lie outside the mirror: trainops reads the mirror only for remote URLs
    and leaves its files out of a local build. The peer still cannot fetch the other
    remotes (MPI Operator, Trainer v2, JobSet, network operators) and fails on those
    kustomizations at once, which makes it look faster than it is.
    """
    operators = work / "base" / "operators"
    shutil.copytree(
        operators / "mirror" / "kubeflow-training-operator-v1.9.0",
        operators / "offline" / "kubeflow-training-operator-v1.9.0",
    )
    (operators / "training-operator" / "kustomization.yaml").write_text(
        (operators / "training-operator" / "kustomization.yaml")
        .read_text()
        .replace(
            "https://github.com/kubeflow/training-operator.git//manifests/overlays/standalone?ref=v1.9.0",
            "../offline/kubeflow-training-operator-v1.9.0/manifests/overlays/standalone",
        )
    )
    thick = (
        operators / "mirror" / "multus-cni-v4.3.0" / "deployments" / "multus-daemonset-thick.yml"
    )
    shutil.copy(thick, operators / "multus" / thick.name)
    (operators / "multus" / "kustomization.yaml").write_text(
        (operators / "multus" / "kustomization.yaml")
        .read_text()
        .replace(
            "https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/v4.3.0/deployments/"
            "multus-daemonset-thick.yml",
            thick.name,
        )
    )


def overlay_dirs(work: Path) -> list[Path]:
    return sorted(
        p.parent
        for p in (work / "overlays").rglob("kustomization.yaml")
        if "kind: Component" not in p.read_text()
    )


def peer_one(directory: Path) -> int:
    command = (
        f"kubectl kustomize {directory} | "
        f"{VENV_BIN / 'kubernetes-validate'} --strict --kubernetes-version {K8S_VERSION} "
        "--quiet --no-warn -"
    )
    done = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    return done.returncode


def time_peer(dirs: list[Path], workers: int) -> tuple[float, list[int]]:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        codes = list(pool.map(peer_one, dirs))
    return time.perf_counter() - start, codes


def time_trainops(work: Path, cache: Path, *flags: str) -> tuple[float, int]:
    env = dict(os.environ, TRAINOPS_CACHE_DIR=str(cache))
    start = time.perf_counter()
    done = subprocess.run(
        [str(VENV_BIN / "trainops"), "validate", "overlays", "--format", "json", *flags],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - start, done.returncode


def rendered_chunks(work: Path) -> list[tuple[str, str]]:
    """(kind, YAML text) of every rendered document, in render order."""
    from trainops.model import Target
    from trainops.render.engine import Renderer, RenderOptions
    from trainops.yamlio import split_documents

    renderer = Renderer(RenderOptions(mirror=work / "base/operators/mirror"))
    chunks = []
    targets = [Target("kustomization", str(d)) for d in overlay_dirs(work)]
    for result in renderer.render(targets):
        for _, chunk in split_documents(result.text):
            kind = next(
                (
                    ln.split(":", 1)[1].strip()
                    for ln in chunk.splitlines()
                    if ln.startswith("kind:")
                ),
                "",
            )
            chunks.append((kind, chunk))
    return chunks


def ours_per_second(chunks: list[tuple[str, str]]) -> float:
    from trainops.schema.check import check_document
    from trainops.schema.registry import SchemaRegistry, crd_location
    from trainops.yamlio import load_documents

    registry = SchemaRegistry(["default", crd_location(REPO / "schemas")], K8S_VERSION, True)

    def one_pass() -> float:
        start = time.perf_counter()
        for _, text in chunks:
            for doc in load_documents(text, source="bench"):
                check_document(doc, registry, missing="error")
        return time.perf_counter() - start

    one_pass()  # compile each kind's schema once, as a long validate run would
    return len(chunks) / min(one_pass() for _ in range(3))


def peer_library_per_second(chunks: list[tuple[str, str]]) -> float:
    import kubernetes_validate

    start = time.perf_counter()
    for _, text in chunks:
        obj = yaml.safe_load(text)
        with contextlib.suppress(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    return len(chunks) / (time.perf_counter() - start)


def with_core_schema(chunks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The documents kubernetes-validate can check: built-in kinds, CRDs aside."""
    from trainops.schema.registry import SchemaRegistry

    core = SchemaRegistry(["default"], K8S_VERSION, strict=True)
    kept = []
    for kind, text in chunks:
        api_version = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in text.splitlines()
                if ln.startswith("apiVersion:")
            ),
            "",
        )
        if kind != "CustomResourceDefinition" and core.lookup(api_version, kind) is not None:
            kept.append((kind, text))
    return kept


def run(copies: int, only: str | None) -> dict:
    work = build_workspace(copies)
    results: dict = {}
    try:
        dirs = overlay_dirs(work)
        print(f"workspace: {len(dirs)} overlays and runs ({copies} copies of each cluster)")
        if only in (None, "validate"):
            results["validate"] = _validate_section(work, dirs)
        if only in (None, "schema"):
            results["schema"] = _schema_section(work)
        if only in (None, "policies"):
            results["policies"] = _policy_section(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def _validate_section(work: Path, dirs: list[Path]) -> dict:
    cores = os.cpu_count() or 1
    peer_seq, codes = time_peer(dirs, 1)
    assert all(code == 0 for code in codes), "the peer pipeline reported errors"
    peer_par, _ = time_peer(dirs, cores)
    cache = Path(tempfile.mkdtemp(prefix="trainops-bench-cache-"))
    try:
        cold, code = time_trainops(work, cache)
        assert code == 0, "trainops validate reported errors"
        warm, _ = time_trainops(work, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    figures = {
        "overlays": len(dirs),
        "peer_sequential_s": round(peer_seq, 2),
        "peer_parallel_s": round(peer_par, 2),
        "trainops_cold_s": round(cold, 2),
        "trainops_warm_s": round(warm, 2),
        "cold_speedup_vs_peer": round(peer_seq / cold, 1),
        "cold_speedup_vs_parallel_peer": round(peer_par / cold, 1),
        "warm_speedup_vs_peer": round(peer_seq / warm, 1),
    }
    print(
        f"\n== trainops validate vs `kubectl kustomize | kubernetes-validate --strict` "
        f"({len(dirs)} overlays, {cores} cores)"
    )
    print(f"  peer, one overlay after another:   {peer_seq:7.2f} s")
    print(f"  peer, {cores} overlays at a time:        {peer_par:7.2f} s")
    print(
        f"  trainops validate, empty cache:    {cold:7.2f} s   "
        f"{figures['cold_speedup_vs_peer']}x faster ({figures['cold_speedup_vs_parallel_peer']}x "
        "against the parallel peer)"
    )
    print(
        f"  trainops validate, nothing changed:{warm:7.2f} s   "
        f"{figures['warm_speedup_vs_peer']}x faster"
    )
    return figures


def _schema_section(work: Path) -> dict:
    chunks = rendered_chunks(work)
    manifests = [c for c in chunks if c[0] != "CustomResourceDefinition"]
    core = with_core_schema(manifests)
    ours_core = ours_per_second(core)
    ours_manifests = ours_per_second(manifests)
    ours_all = ours_per_second(chunks)
    peer = peer_library_per_second(core)
    size = sum(len(t) for _, t in manifests) / len(manifests)
    figures = {
        "documents": len(chunks),
        "manifests": len(manifests),
        "core_manifests": len(core),
        "mean_manifest_bytes": round(size),
        "ours_per_s_core_manifests": round(ours_core),
        "ours_per_s_all_manifests": round(ours_manifests),
        "ours_per_s_including_crds": round(ours_all),
        "kubernetes_validate_per_s_core_manifests": round(peer, 1),
        "speedup_vs_kubernetes_validate": round(ours_core / peer),
    }
    print("\n== schema check throughput, parsing included, one core")
    print(
        f"  built-in kinds ({len(core)} docs): trainops {ours_core:8.0f}/s, "
        f"kubernetes-validate {peer:6.1f}/s -> {figures['speedup_vs_kubernetes_validate']}x"
    )
    print(
        f"  all {len(manifests)} rendered manifests (custom resources included, mean "
        f"{size / 1024:.1f} KiB): trainops {ours_manifests:8.0f}/s"
    )
    print(f"  all {len(chunks)} documents, with the 600 KB CRDs: trainops {ours_all:8.0f}/s")
    return figures


def _policy_section(work: Path) -> dict:
    """Cost of the policy pack: validate with and without it, both from an empty cache."""
    timings: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(2):
        for label, flags in (("without", ("--no-policies",)), ("with", ())):
            cache = Path(tempfile.mkdtemp(prefix="trainops-bench-cache-"))
            try:
                seconds, code = time_trainops(work, cache, *flags)
                assert code == 0
                timings[label].append(seconds)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    without, with_ = min(timings["without"]), min(timings["with"])
    overhead = (with_ - without) / without * 100
    print("\n== policy pack overhead (empty cache, best of 2)")
    print(
        f"  schema only: {without:6.2f} s   schema + policies: {with_:6.2f} s   -> {overhead:+.1f}%"
    )
    return {
        "schema_only_s": round(without, 2),
        "with_policies_s": round(with_, 2),
        "overhead_percent": round(overhead, 1),
    }
