"""`trainops render`: discovery, real kustomize, offline remotes, determinism, caching."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.support import write
from trainops.render.remote import parse_remote

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"
RUN_JOB = (
    "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: r1\nspec:\n  template:\n"
    "    spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n"
    "        image: ghcr.io/example-org/prep:1.0.0\n"
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """An overlay with a nested run, a component, and loose manifests."""
    root = tmp_path / "repo"
    write(root / "base" / "kustomization.yaml", "resources:\n- cm.yaml\n")
    write(root / "base" / "cm.yaml", CM.format(name="base"))
    write(
        root / "comp" / "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
        "kind: Component\nlabels:\n- pairs: {fabric: tcp}\n",
    )
    write(
        root / "overlays" / "lab" / "kustomization.yaml",
        "resources:\n- ../../base\ncomponents:\n- ../../comp\nnamePrefix: lab-\n",
    )
    write(root / "overlays" / "lab" / "values.yaml", "fabric: tcp\n")
    write(root / "overlays" / "lab" / "patches" / "p.yaml", "kind: ConfigMap\n")
    write(
        root / "overlays" / "lab" / "runs" / "r1" / "kustomization.yaml",
        "resources:\n- cm.yaml\n",
    )
    # A run holds job kinds only (run-kind-synced), named after it (run-job-own-name).
    write(root / "overlays" / "lab" / "runs" / "r1" / "cm.yaml", RUN_JOB)
    write(root / "loose" / "a.yaml", "# leading comment\n\n" + CM.format(name="loose"))
    return root


def test_discovery_renders_kustomizations_and_loose_files_only(trainops, tree: Path):
    run = trainops("render", "--format", "json", "overlays", "loose", "comp", cwd=tree)
    assert run.code == 0, run.err
    records = json.loads(run.out)
    assert [(r["source"], r["object"]["metadata"]["name"]) for r in records] == [
        ("overlays/lab", "lab-base"),
        ("overlays/lab/runs/r1", "r1"),
        ("loose/a.yaml:3", "loose"),
    ]
    assert records[0]["object"]["metadata"]["labels"] == {"fabric": "tcp"}


def test_a_line_that_only_looks_like_a_component_kind_keeps_the_run_a_target(trainops, tree):
    # The kind is read from the parsed file: a quoted string's continuation line reading
    # "kind: Component" does not make the run a component that validate skips.
    write(
        tree / "overlays" / "lab" / "runs" / "r1" / "kustomization.yaml",
        'resources:\n- cm.yaml\ncommonAnnotations:\n  note: "first\nkind: Component\n    last"\n',
    )
    run = trainops("render", "--format", "json", "overlays", cwd=tree)
    assert run.code == 0, run.err
    assert ("overlays/lab/runs/r1", "r1") in [
        (r["source"], r["object"]["metadata"]["name"]) for r in json.loads(run.out)
    ]


def test_a_run_directory_without_a_kustomization_renders_as_argo_cd_syncs_it(trainops, tree):
    # Argo CD syncs such a directory's own manifests (a directory source, not recursive).
    write(tree / "overlays" / "lab" / "runs" / "plain" / "job.yaml", RUN_JOB)
    write(tree / "overlays" / "lab" / "runs" / "plain" / "deeper" / "x.yaml", CM.format(name="x"))
    run = trainops("render", "--format", "json", "overlays", cwd=tree)
    assert run.code == 0, run.err
    sources = [(r["source"], r["object"]["metadata"]["name"]) for r in json.loads(run.out)]
    assert ("overlays/lab/runs/plain/job.yaml:1", "r1") in sources
    assert not [s for s in sources if "deeper" in s[0]]


def test_jsonnet_in_a_run_directory_argo_cd_would_evaluate_is_refused(trainops, tree):
    # A directory source renders *.jsonnet too: a Job there would sync unvalidated.
    write(tree / "overlays" / "lab" / "runs" / "plain" / "job.yaml", RUN_JOB)
    write(tree / "overlays" / "lab" / "runs" / "plain" / "grab.jsonnet", '[{kind: "Job"}]\n')
    run = trainops("validate", "overlays", cwd=tree)
    assert run.code == 2 and "Traceback" not in run.err
    assert "overlays/lab/runs/plain/grab.jsonnet" in run.err and "Jsonnet" in run.err
    assert run.out == ""


def test_jsonnet_beside_a_runs_kustomization_is_left_to_kustomize(trainops, tree):
    # With a kustomization Argo CD builds it with kustomize, which reads no Jsonnet.
    run_dir = tree / "overlays" / "lab" / "runs" / "kust"
    write(run_dir / "kustomization.yaml", "resources:\n- j.yaml\n")
    write(run_dir / "j.yaml", RUN_JOB)
    write(run_dir / "notes.jsonnet", "{}\n")
    run = trainops("render", "--format", "json", "overlays", cwd=tree)
    assert run.code == 0, run.err


def test_a_run_named_like_a_skipped_directory_is_still_a_target(trainops, tree):
    # Argo CD's directory generator skips hidden directories only: runs/venv is a run.
    write(
        tree / "overlays" / "lab" / "runs" / "venv" / "kustomization.yaml", "resources:\n- j.yaml\n"
    )
    write(tree / "overlays" / "lab" / "runs" / "venv" / "j.yaml", RUN_JOB)
    run = trainops("render", "--format", "json", "overlays", cwd=tree)
    assert run.code == 0, run.err
    assert "overlays/lab/runs/venv" in {r["source"] for r in json.loads(run.out)}


@pytest.fixture
def reversing_kustomize(tmp_path: Path) -> dict:
    """Puts a `kustomize` on PATH that finishes builds in reverse order: the overlay's
    build waits until the nested run's is done (a file says so), then both run the real
    `kubectl kustomize`. The wait is bounded only to turn a hang into a failure."""
    bin_dir = tmp_path / "reversing-bin"
    run_built = tmp_path / "run-built"
    timed_out = tmp_path / "timed-out"  # the fake waited in vain: its premise broke
    kubectl = shutil.which("kubectl")
    script = write(
        bin_dir / "kustomize",
        f"""#!/bin/sh
# The run is known by its manifest, or as what a wrapper kustomization (the build with
# origin annotations) names.
if grep -qs "name: r1" "$2/cm.yaml" || grep -qs "runs/r1" "$2/kustomization.yaml"; then
  {kubectl} kustomize "$2"; status=$?; touch {run_built}; exit $status
fi
tries=0
while [ ! -e {run_built} ]; do
  tries=$((tries + 1)); [ $tries -gt 6000 ] && touch {timed_out} && exit 1
  sleep 0.05
done
exec {kubectl} kustomize "$2"
""",
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_yaml_output_keeps_sources_and_is_deterministic(
    trainops, tree: Path, reversing_kustomize: dict, tmp_path: Path
):
    first = trainops("render", "-j", "1", cwd=tree)
    # In parallel, the later target's build finishing first: the output keeps source order.
    second = trainops("render", "-j", "4", "--no-cache", cwd=tree, env=reversing_kustomize)
    assert first.code == 0 and first.out == second.out
    assert not (tmp_path / "timed-out").exists()
    assert first.out.startswith("# Source: overlays/lab\napiVersion: v1\n")
    assert "---\n# Source: overlays/lab/runs/r1\n" in first.out


def test_default_path_is_overlays(trainops, tree: Path):
    assert trainops("render", cwd=tree).out == trainops("render", "overlays", cwd=tree).out
    empty = tree / "empty"
    empty.mkdir()
    run = trainops("render", cwd=empty)
    assert run.code == 2 and "no ./overlays directory" in run.err


def _mirror(tmp_path: Path) -> Path:
    mirror = tmp_path / "mirror"
    write(
        mirror / "acme-widgets-v1.2.3" / "deploy" / "kustomization.yaml", "resources:\n- cm.yaml\n"
    )
    write(mirror / "acme-widgets-v1.2.3" / "deploy" / "cm.yaml", CM.format(name="from-git"))
    write(mirror / "widgets-v1.2.3" / "extra.yaml", CM.format(name="from-raw"))
    return mirror


REMOTE_KUSTOMIZATION = """\
resources:
- https://github.com/acme/widgets//deploy?ref=v1.2.3
- https://raw.githubusercontent.com/acme/widgets/v1.2.3/extra.yaml
- local.yaml
"""


def test_remote_resources_render_offline_from_the_mirror(trainops, tmp_path: Path):
    overlay = tmp_path / "overlay"
    write(overlay / "kustomization.yaml", REMOTE_KUSTOMIZATION)
    write(overlay / "local.yaml", CM.format(name="local"))
    run = trainops(
        "render", "--format", "json", "--remote-mirror", str(_mirror(tmp_path)), str(overlay)
    )
    assert run.code == 0, run.err
    names = [r["object"]["metadata"]["name"] for r in json.loads(run.out)]
    assert sorted(names) == ["from-git", "from-raw", "local"]
    env = {"TRAINOPS_REMOTE_MIRROR": str(_mirror(tmp_path))}
    assert trainops("render", "--format", "json", str(overlay), env=env).out == run.out


def test_remote_without_mirror_is_a_warning_naming_the_url_and_an_error_in_a_run(
    trainops, tmp_path: Path
):
    overlay = tmp_path / "overlay"
    write(overlay / "kustomization.yaml", REMOTE_KUSTOMIZATION)
    write(overlay / "local.yaml", CM.format(name="local"))
    run = trainops("validate", "--format", "json", str(overlay), cwd=tmp_path)
    assert run.code == 0, run.err
    report = json.loads(run.out)
    warnings = [f for f in report["findings"] if f["rule"] == "remote-resource"]
    assert [w["severity"] for w in warnings] == ["warning", "warning"]
    assert "https://github.com/acme/widgets//deploy?ref=v1.2.3" in warnings[0]["message"]
    assert warnings[0]["source"].endswith("kustomization.yaml:2")
    assert report["summary"]["resources"] == 1  # the local resource is still validated
    # In a run, Argo CD would sync what validate could not see: an error.
    run_dir = tmp_path / "overlays" / "lab" / "runs" / "r1"
    write(run_dir / "kustomization.yaml", REMOTE_KUSTOMIZATION)
    write(run_dir / "local.yaml", RUN_JOB)
    in_run = trainops("validate", "--format", "json", str(run_dir), cwd=tmp_path)
    assert in_run.code == 1, in_run.err
    found = [f for f in json.loads(in_run.out)["findings"] if f["rule"] == "remote-resource"]
    assert [f["severity"] for f in found] == ["error", "error"]


OVERRIDE = """\
kustomize:
  commonAnnotations:
    argocd.argoproj.io/sync-options: Replace=true
"""


@pytest.mark.parametrize("name", [".argocd-source.yaml", ".argocd-source-lab-r1.yaml"])
def test_an_argo_cd_override_file_is_an_error_in_a_run_and_a_warning_elsewhere(
    trainops, tmp_path: Path, name: str
):
    """Argo CD merges it into the Application's source: what it syncs is not the render
    (round 7 of the attack: a run renamed onto another run's job, force-replaced)."""
    run_dir = tmp_path / "overlays" / "lab" / "runs" / "r1"
    write(run_dir / "kustomization.yaml", "resources:\n- job.yaml\n")
    write(run_dir / "job.yaml", RUN_JOB)
    clean = trainops("validate", "--format", "json", str(run_dir), cwd=tmp_path)
    assert not [f for f in json.loads(clean.out)["findings"] if f["severity"] == "error"]
    write(run_dir / name, OVERRIDE)
    in_run = trainops("validate", "--format", "json", str(run_dir), cwd=tmp_path)
    assert in_run.code == 1, in_run.err
    [found] = [
        f for f in json.loads(in_run.out)["findings"] if f["rule"] == "argocd-source-override"
    ]
    assert found["severity"] == "error" and name in found["message"], found
    assert found["file"].endswith(name)
    # Removed again, the cached render reports nothing: the file is looked up each time.
    (run_dir / name).unlink()
    again = trainops("validate", "--format", "json", str(run_dir), cwd=tmp_path)
    assert not [f for f in json.loads(again.out)["findings"] if f["severity"] == "error"]
    overlay = tmp_path / "overlay"
    write(overlay / "kustomization.yaml", "resources:\n- cm.yaml\n")
    write(overlay / "cm.yaml", CM.format(name="local"))
    write(overlay / name, OVERRIDE)
    elsewhere = trainops("validate", "--format", "json", str(overlay), cwd=tmp_path)
    assert elsewhere.code == 0, elsewhere.err
    found = [
        f for f in json.loads(elsewhere.out)["findings"] if f["rule"] == "argocd-source-override"
    ]
    assert [f["severity"] for f in found] == ["warning"]


def test_unparseable_remote_and_patches_on_missing_remote_are_still_reported(
    trainops, tmp_path: Path
):
    overlay = tmp_path / "overlay"
    write(
        overlay / "kustomization.yaml",
        "resources:\n- https://github.com/acme/widgets//deploy?ref=v9\npatches:\n- path: p.yaml\n",
    )
    write(overlay / "p.yaml", CM.format(name="from-git"))
    run = trainops("validate", "--format", "json", str(overlay), cwd=tmp_path)
    assert run.code == 0, run.err
    messages = [f["message"] for f in json.loads(run.out)["findings"]]
    assert any("has no offline copy" in m for m in messages)
    assert any(m.startswith("not rendered offline") for m in messages)


@pytest.mark.parametrize(
    ("url", "owner", "repo", "ref", "path", "is_file"),
    [
        (
            "https://github.com/kubeflow/training-operator.git//manifests/overlays/standalone?ref=v1.9.0",
            "kubeflow",
            "training-operator",
            "v1.9.0",
            "manifests/overlays/standalone",
            False,
        ),
        (
            "github.com/kubeflow/training-operator/manifests/overlays/standalone?ref=v1.9.0",
            "kubeflow",
            "training-operator",
            "v1.9.0",
            "manifests/overlays/standalone",
            False,
        ),
        (
            "https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/v4.3.0/deployments/multus-daemonset-thick.yml",
            "k8snetworkplumbingwg",
            "multus-cni",
            "v4.3.0",
            "deployments/multus-daemonset-thick.yml",
            True,
        ),
        (
            "git@github.com:acme/widgets.git/deploy?ref=abc1234",
            "acme",
            "widgets",
            "abc1234",
            "deploy",
            False,
        ),
        (
            "https://gitlab.com/group/sub/proj.git//k8s?ref=main",
            "group-sub",
            "proj",
            "main",
            "k8s",
            False,
        ),
    ],
)
def test_remote_url_forms(url, owner, repo, ref, path, is_file):
    parsed = parse_remote(url)
    assert (parsed.owner, parsed.repo, parsed.ref, parsed.path, parsed.is_file) == (
        owner,
        repo,
        ref,
        path,
        is_file,
    )


def test_pinning_is_recognised():
    assert parse_remote("github.com/a/b/x?ref=v1.9.0").pinned
    assert parse_remote("github.com/a/b/x?ref=0123456789abcdef0123").pinned
    assert not parse_remote("github.com/a/b/x?ref=main").pinned
    assert not parse_remote("github.com/a/b/x").pinned
    release = parse_remote("https://github.com/a/b/releases/download/v0.12.0/manifests.yaml")
    assert release.pinned and (release.ref, release.path) == ("v0.12.0", "manifests.yaml")


@pytest.fixture
def counting_kustomize(tmp_path: Path) -> tuple[dict, Path]:
    """Puts a `kustomize` on PATH that logs each build, then runs the real `kubectl kustomize`."""
    bin_dir = tmp_path / "bin"
    log = tmp_path / "builds.log"
    script = write(
        bin_dir / "kustomize",
        f'#!/bin/sh\necho "$2" >> {log}\nexec {shutil.which("kubectl")} kustomize "$2"\n',
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return env, log


def _builds(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_unchanged_inputs_are_not_built_again(trainops, tree: Path, counting_kustomize):
    env, log = counting_kustomize
    first = trainops("validate", cwd=tree, env=env)
    assert first.code == 0 and _builds(log) == 2
    again = trainops("validate", cwd=tree, env=env)
    assert again.out == first.out and _builds(log) == 2
    trainops("render", cwd=tree, env=env)
    assert _builds(log) == 2  # the render cache is shared
    (tree / "base" / "cm.yaml").write_text(CM.format(name="changed"))
    changed = trainops("validate", cwd=tree, env=env)
    assert changed.code == 0 and _builds(log) == 3  # only the overlay using base/ rebuilt
    trainops("validate", "--no-cache", cwd=tree, env=env)
    assert _builds(log) == 5


def test_an_argo_cd_override_file_beside_a_runs_plain_files_is_reported_once(
    trainops, tmp_path: Path
):
    """A run directory without a kustomization is an Argo CD directory source, which
    takes the override file as well (the round-7 rule looked beside kustomizations only)."""
    run_dir = tmp_path / "overlays" / "lab" / "runs" / "r1"
    write(run_dir / "job.yaml", RUN_JOB)
    write(run_dir / "more.yaml", CM.format(name="r1-notes"))
    clean = trainops("validate", "--format", "json", str(run_dir), cwd=tmp_path)
    assert not [f for f in json.loads(clean.out)["findings"] if f["rule"].startswith("argocd")]
    write(run_dir / ".argocd-source.yaml", OVERRIDE)
    in_run = trainops("validate", "--format", "json", str(run_dir), cwd=tmp_path)
    assert in_run.code == 1, in_run.err
    [found] = [
        f for f in json.loads(in_run.out)["findings"] if f["rule"] == "argocd-source-override"
    ]
    assert found["severity"] == "error" and found["file"].endswith(".argocd-source.yaml")


def test_a_kustomize_crash_is_reported_by_its_panic_not_its_stack_dump():
    """Attack round 13 (F2): a Go panic's last line is a stack frame, not the cause."""
    from trainops.render.kustomize import clean_error

    stderr = (
        "panic: number of previous names, number of previous namespaces not equal\n\n"
        "goroutine 1 [running]:\nsigs.k8s.io/kustomize/api/resource.(*Resource).x(...)\n"
        "\tk8s.io/kubernetes/cmd/kubectl-sdk/kubectl.go:41 +0x85\n"
    )
    assert clean_error(stderr) == (
        "kustomize crashed (panic: number of previous names, number of previous namespaces "
        "not equal)"
    )
    oom = "fatal error: runtime: out of memory\n\nruntime stack:\nruntime/mgc.go:1328 +0x105\n"
    assert clean_error(oom) == "kustomize crashed (fatal error: runtime: out of memory)"
