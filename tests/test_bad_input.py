"""Bad input: one line naming file and line, exit 2, nothing on stdout, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import write

VALID_HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"


def assert_input_error(run, where: str) -> None:
    assert run.code == 2, run
    assert run.out == "", "no partial output on stdout"
    assert "Traceback" not in run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("trainops: error: "), lines[0]
    assert where in lines[0], (where, lines[0])


@pytest.mark.parametrize(
    ("name", "text", "line", "words"),
    [
        ("syntax", VALID_HEAD + "data:\n  key: [unclosed\n", 6, "invalid YAML"),
        ("tabs", VALID_HEAD + "data:\n\tkey: value\n", 6, "tab character"),
        ("list-document", "- a\n- b\n", 1, "not a mapping"),
        ("scalar-document", "just text\n", 1, "not a mapping"),
        ("no-apiversion", "kind: ConfigMap\nmetadata:\n  name: a\n", 1, "no 'apiVersion'"),
        ("no-kind", "apiVersion: v1\nmetadata:\n  name: a\n", 1, "no 'kind'"),
        ("second-document", VALID_HEAD + "---\napiVersion: v1\nkind: [\n", 7, "invalid YAML"),
    ],
)
def test_yaml_problems_name_file_and_line(trainops, tmp_path: Path, name, text, line, words):
    path = write(tmp_path / f"{name}.yaml", text)
    run = trainops("validate", str(path))
    assert_input_error(run, f"{path}:{line}: ")
    assert words in run.err


def test_a_json_patch_beside_manifests_is_a_warning_and_the_rest_is_checked(
    trainops, tmp_path: Path
):
    # A kustomize JSON 6902 patch in a directory without a kustomization is not an object:
    # it is reported and skipped, and the objects beside it are still validated.
    write(tmp_path / "patch.yaml", "- op: replace\n  path: /spec/replicas\n  value: 2\n")
    write(tmp_path / "cm.yaml", VALID_HEAD)
    run = trainops("validate", str(tmp_path))
    assert run.code == 0, run
    assert "patch.yaml: warning: a JSON 6902 patch, not a Kubernetes object" in run.out
    assert "[json-patch-file]" in run.out and "1 resource" in run.out


def test_a_list_that_is_not_a_patch_is_still_refused(trainops, tmp_path: Path):
    path = write(tmp_path / "ops.yaml", "- op: replace\n  value: 2\n- name: x\n")
    assert_input_error(trainops("validate", str(path)), f"{path}:1: ")


def test_alias_bomb_is_refused_quickly(trainops, tmp_path: Path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(9):
        prev, cur = chr(97 + i), chr(98 + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    path = write(tmp_path / "bomb.yaml", "\n".join(lines) + "\n")
    run = trainops("validate", str(path))
    # go-yaml's rule (more than 99% of over 1,000 decoded nodes from aliases) first
    # trips on the fourth alias of line 4, where kubectl gives up too.
    assert_input_error(run, f"{path}:4: ")
    assert "alias" in run.err


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("flow-10k", "a: " + "[" * 10_000 + "]" * 10_000 + "\n", 1),
        ("flow-100k", VALID_HEAD + "data: " + "{a: " * 100_000 + "}" * 100_000 + "\n", 5),
        ("dashes-100k", "- " * 100_000 + "x\n", 1),
        ("indented", "".join(" " * i + "a:\n" for i in range(300)), 257),
    ],
)
def test_deep_nesting_is_refused_at_its_line(trainops, tmp_path: Path, name, text, line):
    path = write(tmp_path / f"{name}.yaml", text)
    run = trainops("validate", str(path))
    assert_input_error(run, f"{path}:{line}: nesting deeper than 256 levels")


def test_anchor_cycle_and_unknown_alias(trainops, tmp_path: Path):
    cycle = write(tmp_path / "cycle.yaml", VALID_HEAD + "data: &d\n  self: *d\n")
    assert_input_error(trainops("validate", str(cycle)), f"{cycle}:6: anchor 'd' value contains")
    unknown = write(tmp_path / "unknown.yaml", VALID_HEAD + "data: *nowhere\n")
    assert_input_error(trainops("validate", str(unknown)), f"{unknown}:5: unknown anchor")


def test_values_json_cannot_hold(trainops, tmp_path: Path):
    path = write(tmp_path / "inf.yaml", VALID_HEAD + "data:\n  big: .inf\n")
    assert_input_error(trainops("validate", str(path)), f"{path}:6: .inf cannot be converted")


def test_binary_file(trainops, tmp_path: Path):
    path = tmp_path / "image.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert_input_error(trainops("validate", str(path)), f"{path}: binary file")


def test_invalid_utf8(trainops, tmp_path: Path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(VALID_HEAD.encode() + b"data:\n  k: caf\xe9\n")
    assert_input_error(trainops("validate", str(path)), f"{path}:6: not UTF-8")


def test_huge_file(trainops, tmp_path: Path):
    path = tmp_path / "huge.yaml"
    path.write_text(VALID_HEAD + "data:\n  k: '" + "x" * (17 * 2**20) + "'\n")
    run = trainops("validate", str(path))
    assert_input_error(run, f"{path}: file is 17.0 MiB")
    # Read in full once allowed; the API server then refuses a 17 MiB ConfigMap (1 MiB limit).
    allowed = trainops("validate", "--max-file-size", "32", str(path))
    assert allowed.code == 1 and "Too long: may not be more than 1048576 bytes" in allowed.out
    assert trainops("validate", "--max-file-size", "32", "--skip-api-checks", str(path)).code == 0


def test_missing_path(trainops, tmp_path: Path):
    missing = tmp_path / "nope"
    assert_input_error(trainops("validate", str(missing)), f"{missing}: no such file")


def test_kustomization_with_missing_resource(trainops, tmp_path: Path):
    write(tmp_path / "k" / "kustomization.yaml", "resources:\n- present.yaml\n- absent.yaml\n")
    write(tmp_path / "k" / "present.yaml", VALID_HEAD)
    run = trainops("validate", str(tmp_path / "k"))
    assert_input_error(run, "kustomization.yaml:3: resources entry 'absent.yaml' does not exist")


def test_kustomize_failure(trainops, tmp_path: Path):
    write(
        tmp_path / "k" / "kustomization.yaml", "resources:\n- cm.yaml\npatches:\n- path: p.yaml\n"
    )
    write(tmp_path / "k" / "cm.yaml", VALID_HEAD)
    write(tmp_path / "k" / "p.yaml", VALID_HEAD.replace("name: a", "name: other"))
    run = trainops("validate", str(tmp_path / "k"))
    assert_input_error(run, "k: kustomize build failed: no resource matches strategic merge patch")


def test_broken_yaml_inside_a_kustomization_names_the_file(trainops, tmp_path: Path):
    write(tmp_path / "k" / "kustomization.yaml", "resources:\n- cm.yaml\n")
    write(tmp_path / "k" / "cm.yaml", VALID_HEAD + "  name: twice\n")
    run = trainops("validate", str(tmp_path / "k"))
    assert run.code == 2 and run.out == ""
    assert "kustomize build failed" in run.err and "already defined" in run.err
    assert "Traceback" not in run.err


def test_one_bad_target_means_no_report_at_all(trainops, tmp_path: Path):
    write(tmp_path / "good.yaml", VALID_HEAD)
    bad = write(tmp_path / "zz-bad.yaml", "a: [\n")
    run = trainops("validate", "--format", "json", str(tmp_path))
    assert_input_error(run, f"{bad}:")


def test_unknown_option_is_a_usage_error(trainops):
    run = trainops("validate", "--no-such-flag")
    assert run.code == 2
    assert "No such option" in run.err
