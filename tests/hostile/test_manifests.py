"""Hostile manifest files given to validate, render and kubeconform: encodings, bombs,
depth, tags that would build objects, sizes. Class: bounded work on any input; never
a traceback, exit 2 with one line for what cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.harness import CONFIGMAP, assert_handled, run_cli, write

HEAD = CONFIGMAP.format(name="a")


def _nested_flow(depth: int) -> str:
    return HEAD.replace("  k: v\n", "  k: " + "[" * depth + "]" * depth + "\n")


def _nested_block(depth: int) -> str:
    lines = [HEAD.replace("data:\n  k: v\n", "data:")]
    lines += [" " * (2 * (i + 1)) + f"k{i}:" for i in range(depth)]
    return "\n".join(lines) + " x\n"


def _alias_bomb(width: int = 9, levels: int = 9) -> str:
    lines = ['a: &a ["' + '","'.join(["lol"] * width) + '"]']
    for i in range(levels):
        lines.append(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * width) + "]"
        )
    return "\n".join(lines) + "\n"


def _merge_bomb() -> str:
    lines = ["a0: &a0 {x: 1}"]
    for i in range(1, 40):
        lines.append(f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], y{i}: 1}}")
    return "\n".join(lines) + "\n"


# (case id, file content, exit codes allowed)
CASES: list[tuple[str, str | bytes, set[int]]] = [
    ("utf8-bom", "\ufeff" + HEAD, {0}),
    ("utf16-le-bom", ("\ufeff" + HEAD).encode("utf-16-le"), {2}),
    ("utf16-be-bom", ("\ufeff" + HEAD).encode("utf-16-be"), {2}),
    ("utf32-bom", ("\ufeff" + HEAD).encode("utf-32"), {2}),
    ("latin1-bytes", HEAD.encode() + "  j: caf\xe9\n".encode("latin-1"), {2}),
    ("lone-surrogate-bytes", HEAD.encode() + b"  j: \xed\xa0\x80\n", {2}),
    ("overlong-utf8", HEAD.encode() + b"  j: \xc0\xaf\n", {2}),
    ("nul-byte", HEAD.encode() + b"  j: a\x00b\n", {2}),
    ("nul-at-end", HEAD.encode() + b"\x00", {2}),
    ("crlf", HEAD.replace("\n", "\r\n"), {0}),
    ("lone-cr", HEAD.replace("\n", "\r"), {0, 1, 2}),
    ("mixed-newlines", HEAD.replace("\n", "\r\n", 2), {0}),
    ("control-chars", HEAD + "  j: \x07\x1b[31m\n", {2}),
    ("escaped-control", HEAD + '  j: "\\x07\\u001b"\n', {0}),
    ("bidi-override", HEAD + "  j: \u202eevil\n", {0, 1}),
    ("emoji-keys", HEAD + "  \U0001f525: v\n", {0, 1}),
    ("empty", "", {0, 1, 2}),
    ("only-comments", "# nothing\n# here\n", {0, 1, 2}),
    ("only-separators", "---\n---\n---\n", {0, 1, 2}),
    ("document-end-marker", HEAD + "...\n", {0}),
    ("yaml-directive", "%YAML 1.1\n---\n" + HEAD, {0, 2}),
    ("tag-directive", "%TAG !e! tag:example.com,2000:\n---\n" + HEAD, {0, 1, 2}),
    ("unknown-directive", "%FOO bar\n---\n" + HEAD, {0, 1, 2}),
    ("python-object-tag", HEAD + "  j: !!python/object/apply:os.system ['touch PWNED']\n", {1, 2}),
    ("python-name-tag", HEAD + "  j: !!python/name:os.system\n", {0, 1, 2}),
    ("custom-tag", HEAD + "  j: !Ref other\n", {0, 1, 2}),
    ("binary-tag", HEAD + "  j: !!binary aGVsbG8=\n", {0, 1, 2}),
    ("set-tag", HEAD + "  j: !!set {a, b}\n", {0, 1, 2}),
    ("undefined-alias", HEAD + "  j: *nope\n", {2}),
    ("alias-bomb", _alias_bomb(), {2}),
    ("alias-bomb-small", _alias_bomb(3, 3), {1, 2}),
    ("merge-key-bomb", _merge_bomb(), {1, 2}),
    ("self-merge", "a: &a {<<: *a}\n", {1, 2}),
    ("recursive-alias", "a: &a [*a]\n", {1, 2}),
    ("flow-depth-1000", _nested_flow(1000), {0, 1, 2}),
    ("flow-depth-10000", _nested_flow(10_000), {2}),
    ("block-depth-2000", _nested_block(2000), {0, 1, 2}),
    ("line-1mb", HEAD + "  big: " + "a" * (1 << 20) + "\n", {0, 1}),
    ("key-1mb", HEAD + "  " + "k" * (1 << 20) + ": v\n", {0, 1, 2}),
    ("unclosed-quote-1mb", HEAD + '  j: "' + "a" * (1 << 20) + "\n", {2}),
    ("many-documents", ("---\n" + HEAD) * 5000, {0, 1}),
    ("many-keys", HEAD + "".join(f"  k{i}: v\n" for i in range(20000)), {0, 1}),
    # kubectl applies it with the last value: a finding, and the rest is checked
    ("duplicate-key", HEAD + "  k: w\n", {0}),
    ("tab-indent", HEAD + "\tj: v\n", {2}),
    ("huge-int", HEAD.replace("data:\n  k: v\n", "spec: {replicas: " + "9" * 5000 + "}\n"), {1, 2}),
    ("huge-float", HEAD + "  j: 1e99999\n", {0, 1}),
    ("nan-inf", HEAD.replace("data:\n  k: v\n", "x: [.nan, .inf, -.inf]\n"), {1, 2}),
    ("kind-is-list", "apiVersion: v1\nkind: [ConfigMap]\nmetadata: {name: a}\n", {1, 2}),
    ("metadata-is-string", "apiVersion: v1\nkind: ConfigMap\nmetadata: a\n", {1, 2}),
    ("name-is-map", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {a: b}}\n", {1, 2}),
    ("apiversion-int", "apiVersion: 1\nkind: ConfigMap\nmetadata: {name: a}\n", {1, 2}),
    ("list-kind-items-garbage", "apiVersion: v1\nkind: List\nitems: [1, a, [b]]\n", {1, 2}),
    ("list-kind-nested", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n"
     "  items:\n  - " + HEAD.replace("\n", "\n    ").rstrip() + "\n", {0, 1, 2}),
    ("json-input", '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}', {0}),
    ("json-trailing-garbage", '{"apiVersion": "v1"} }}}', {2}),
    ("null-document", "null\n", {0, 1, 2}),
    ("scalar-document", "42\n", {2}),
    ("crd-with-garbage-schema",
     "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
     "metadata: {name: a.b.c}\nspec: {group: b.c, names: {kind: A, plural: a}, scope: x,\n"
     "  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: 5}}]}\n",
     {1, 2}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "content", "codes"), CASES, ids=[c[0] for c in CASES])
def test_validate_hostile_file(tmp_path: Path, name: str, content, codes: set[int]):
    path = write(tmp_path / f"{name}.yaml", content)
    outcome = run_cli("validate", "--no-cache", path.name, cwd=tmp_path)
    assert_handled(outcome)
    assert outcome.code in codes, outcome
    assert not (tmp_path / "PWNED").exists()  # a tag never runs code


@pytest.mark.parametrize(
    "name", ["python-object-tag", "alias-bomb", "nul-byte", "utf16-le-bom", "duplicate-key"]
)
def test_render_hostile_file(tmp_path: Path, name: str):
    content = dict((c[0], c[1]) for c in CASES)[name]
    path = write(tmp_path / f"{name}.yaml", content)
    outcome = run_cli("render", "--no-cache", path.name, cwd=tmp_path)
    assert_handled(outcome)
    assert outcome.code in (0, 2)


@pytest.mark.parametrize(
    "name", ["alias-bomb", "nul-byte", "latin1-bytes", "python-object-tag", "empty", "crlf"]
)
def test_kubeconform_hostile_file(tmp_path: Path, name: str):
    content = dict((c[0], c[1]) for c in CASES)[name]
    path = write(tmp_path / f"{name}.yaml", content)
    outcome = run_cli("kubeconform", "-summary", path.name, cwd=tmp_path)
    assert outcome.exception is None and "Traceback" not in outcome.err
    assert outcome.code in (0, 1, 2)


@pytest.mark.parametrize("name", ["alias-bomb", "nul-byte", "utf16-le-bom", "python-object-tag"])
def test_stdin_hostile(tmp_path: Path, name: str):
    content = dict((c[0], c[1]) for c in CASES)[name]
    text = content.decode("latin-1") if isinstance(content, bytes) else content
    outcome = run_cli("validate", "--no-cache", "-", cwd=tmp_path, stdin=text)
    assert_handled(outcome)
    assert not (tmp_path / "PWNED").exists()
