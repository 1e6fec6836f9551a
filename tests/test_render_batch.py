"""Kustomizations built together in one kustomize process give what each gives alone.

Every comparison runs the real kustomize twice: once for the shared build and once for
each kustomization alone, as `trainops validate` did before builds were shared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import MIRROR, REPO, write
from trainops.cache import Cache
from trainops.errors import InputError
from trainops.model import Target
from trainops.render import batch, kustomize
from trainops.render.discover import discover
from trainops.render.engine import Renderer, RenderOptions
from trainops.render.inputs import collect_inputs

CM = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: training
data:
  k: {value}
"""
POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: training
spec:
  containers:
  - name: main
    image: busybox:1.36
    envFrom:
    - configMapRef:
        name: {config}
"""


def alone(path: Path) -> str:
    """The output of one kustomization built by itself, as the renderer keeps it."""
    renderer = Renderer(RenderOptions(mirror=MIRROR, jobs=1))
    (plan,) = renderer.plan([Target("kustomization", str(path))])
    return renderer._build(plan.inputs, plan.target)[0]


def rendered(paths: list[Path], jobs: int = 1, cache: Cache | None = None) -> tuple[list[str], int]:
    """The renderer's output for each path, and how many kustomize processes it ran."""
    calls = []
    real = kustomize.run

    def counting(directory, shown, allow_network):
        calls.append(directory)
        return real(directory, shown, allow_network)

    renderer = Renderer(RenderOptions(mirror=MIRROR, jobs=jobs), cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kustomize, "run", counting)
        results = renderer.render([Target("kustomization", str(p)) for p in paths])
    return [r.text for r in results], len(calls)


def graphs(paths: list[Path]):
    return [collect_inputs(p, MIRROR) for p in paths]


def runs(root: Path, count: int, extra: dict[int, str] | None = None) -> list[Path]:
    """`count` run kustomizations under root/runs, each renaming the base's one Pod;
    `extra` adds fields to some of them."""
    write(root / "base" / "kustomization.yaml", "resources:\n- pod.yaml\n")
    write(root / "base" / "pod.yaml", POD.format(name="job", config="shared-settings"))
    paths = []
    for number in range(count):
        rename = f'[{{"op": "replace", "path": "/metadata/name", "value": "r{number}"}}]'
        path = root / "runs" / f"r{number:02d}"
        write(
            path / "kustomization.yaml",
            "resources:\n- ../../base\n"
            f"patches:\n- target: {{kind: Pod, name: job}}\n  patch: '{rename}'\n"
            + (extra or {}).get(number, ""),
        )
        paths.append(path)
    return paths


def test_the_repository_renders_the_same_shared_as_alone():
    """Every kustomization of overlays/ and base/training: the templates and runs share
    builds, and each output is byte for byte its own build's (origins, transformations,
    order)."""
    targets = [t for t in discover(["overlays", "base/training"]) if t.kind == "kustomization"]
    paths = [REPO / t.path if not Path(t.path).is_absolute() else Path(t.path) for t in targets]
    renderer = Renderer(RenderOptions(mirror=MIRROR, jobs=1))
    plans = renderer.plan([Target("kustomization", str(p)) for p in paths])
    renderer.expect(plans)
    texts = {p.target.path: renderer._shared_text(p.key) for p in plans}
    shared = {path: text for path, text in texts.items() if text is not None}
    assert len(shared) >= 20
    for path, text in shared.items():
        assert "batch-slot" not in text
        assert text == alone(Path(path)), path


def test_sibling_runs_share_one_kustomize_process(tmp_path: Path):
    paths = runs(tmp_path, 40)
    texts, processes = rendered(paths)
    assert processes == 2  # 40 runs: two shared builds of 20 (at most 32 to a build)
    assert texts == [alone(p) for p in paths]
    assert "name: r7\n" in texts[7]


def test_each_output_of_a_shared_build_is_cached(tmp_path: Path):
    paths = runs(tmp_path, 4)
    cache = Cache(tmp_path / "cache")
    first, processes = rendered(paths, cache=cache)
    assert processes == 1
    assert rendered(paths, cache=cache) == (first, 0)


def test_two_render_threads_build_different_groups(tmp_path: Path):
    paths = runs(tmp_path, 6)
    texts, processes = rendered(paths, jobs=2)
    assert processes == 2
    assert texts == [alone(p) for p in paths]


def test_a_name_reference_fixed_across_slots_is_built_alone(tmp_path: Path):
    """r0 names a ConfigMap `settings` it does not hold; r1 holds one, renamed by its
    prefix to `b-settings`. Built together, kustomize's top-level name-reference pass
    points r0 at r1's `b-settings`: r0 is built alone instead."""
    write(tmp_path / "base" / "kustomization.yaml", "resources:\n- pod.yaml\n")
    write(tmp_path / "base" / "pod.yaml", POD.format(name="job", config="settings"))
    r0, r1 = tmp_path / "runs" / "r0", tmp_path / "runs" / "r1"
    write(r0 / "kustomization.yaml", "resources:\n- ../../base\n")
    write(r1 / "kustomization.yaml", "resources:\n- ../../base\n- cm.yaml\nnamePrefix: b-\n")
    write(r1 / "cm.yaml", CM.format(name="settings", value="x"))
    own = [alone(r0), alone(r1)]
    assert "name: settings\n" in own[0] and "b-settings" not in own[0]

    with pytest.MonkeyPatch.context() as patch:  # without the check: the wrong output
        patch.setattr(batch, "_meeting_slots", lambda outputs: set())
        unchecked = batch.build_together(graphs([r0, r1]))
    assert unchecked[0] is not None and "name: b-settings" in unchecked[0]

    checked = batch.build_together(graphs([r0, r1]))
    assert checked[0] is None and checked[1] == own[1]
    texts, _ = rendered([r0, r1])
    assert texts == own


def test_generated_names_that_meet_fall_back_to_separate_builds(tmp_path: Path):
    generator = "configMapGenerator:\n- name: settings\n  namespace: training\n  literals: [a=1]\n"
    paths = runs(tmp_path, 3, {0: generator, 1: generator})
    assert batch.build_together(graphs(paths)) == [None, None, None]  # the same id twice
    texts, processes = rendered(paths)
    assert texts == [alone(p) for p in paths]
    assert processes == 4  # the shared build that failed, then each alone


def test_a_broken_kustomization_reports_its_own_error(tmp_path: Path):
    paths = runs(tmp_path, 3)
    write(
        paths[1] / "kustomization.yaml",
        "resources:\n- ../../base\npatches:\n- target: {kind: Pod}\n"
        '  patch: \'[{"op": "remove", "path": "/nope"}]\'\n',
    )
    with pytest.raises(InputError) as shared:
        rendered(paths)
    renderer = Renderer(RenderOptions(mirror=MIRROR, jobs=1))
    with pytest.raises(InputError) as own:
        renderer.render([Target("kustomization", str(paths[1]))])
    assert shared.value.message == own.value.message
    assert shared.value.file == str(paths[1])


def test_fifo_order_is_kept_per_kustomization(tmp_path: Path):
    paths = []
    for number in range(3):
        path = tmp_path / "runs" / f"r{number}"
        write(path / "pod.yaml", POD.format(name=f"p{number}", config="x"))
        write(path / "cm.yaml", CM.format(name=f"c{number}", value="1"))
        write(
            path / "kustomization.yaml",
            "resources:\n- pod.yaml\n- cm.yaml\nsortOptions:\n  order: fifo\n",
        )
        paths.append(path)
    texts, processes = rendered(paths)
    assert processes == 1
    assert texts == [alone(p) for p in paths]
    # fifo: the Pod as listed, before the ConfigMap that the legacy order puts first
    assert texts[2].index("name: p2") < texts[2].index("name: c2")


@pytest.mark.parametrize(
    "body, other",
    [
        ("vars:\n- name: X\n  objref: {kind: Pod, name: job, apiVersion: v1}\n", None),
        ("configurations:\n- conf.yaml\n", ("conf.yaml", "nameReference: []\n")),
        ("commonAnnotations:\n  config.kubernetes.io/local-config: 'true'\n", None),
    ],
    ids=["vars", "configurations", "local-config"],
)
def test_what_reaches_other_kustomizations_is_never_shared(tmp_path: Path, body, other):
    (path,) = runs(tmp_path, 1, {0: body})
    if other:
        write(path / other[0], other[1])
    assert not batch.shareable(collect_inputs(path, MIRROR))


def test_a_schema_met_after_a_transformation_is_never_shared(tmp_path: Path):
    """kustomize keeps the first schema it meets for the whole process: a build that
    patched with the built-in schema before meeting its own would, sharing a process
    that met that schema earlier, patch with it instead."""
    schema = "kind: Component\nopenapi:\n  version: v1.21.2\n"
    write(tmp_path / "schema" / "kustomization.yaml", schema)
    for name, extra in (("plain", ""), ("labelled", "commonLabels: {team: a}\n")):
        write(tmp_path / name / "pod.yaml", POD.format(name="job", config="x"))
        write(tmp_path / name / "kustomization.yaml", "resources:\n- pod.yaml\n" + extra)
        write(
            tmp_path / "runs" / name / "kustomization.yaml",
            f"resources:\n- ../../{name}\ncomponents:\n- ../../schema\n",
        )
    first = collect_inputs(tmp_path / "runs" / "plain", MIRROR)
    after = collect_inputs(tmp_path / "runs" / "labelled", MIRROR)
    assert first.schema == after.schema == ("version", "v1.21.2")
    assert batch.shareable(first) and not batch.shareable(after)


def test_kustomizations_holding_the_same_object_are_built_alone():
    """base/networks' variants of one NetworkAttachmentDefinition: built together, the
    same object twice fails the shared build, and each is built alone."""
    paths = [REPO / "base" / "networks" / name for name in ("macvlan", "host-device")]
    assert batch.build_together(graphs(paths)) == [None, None]


def test_a_component_is_never_shared(tmp_path: Path):
    write(
        tmp_path / "c" / "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
    )
    assert not batch.shareable(collect_inputs(tmp_path / "c", MIRROR))


def test_a_schema_set_before_any_patch_is_shared_only_with_the_same_schema(tmp_path: Path):
    """The templates' merge-keys component sets kustomize's schema before their patches
    run; a run without it must not share a process with them (it would patch with the
    merge-keys schema)."""
    templates = REPO / "overlays" / "prod-roce" / "training"
    with_schema = [templates / "pytorchjob", templates / "elastic"]
    assert all(batch.shareable(g) for g in graphs(with_schema))
    plain = runs(tmp_path, 2)
    renderer = Renderer(RenderOptions(mirror=MIRROR, jobs=1))
    keys = {renderer._schema_identity(g) for g in graphs(with_schema)}
    assert len(keys) == 1 and keys != {renderer._schema_identity(graphs(plain)[0])}
