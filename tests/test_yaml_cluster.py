"""YAML is read as the cluster reads it (sigs.k8s.io/yaml, go-yaml v2), fast path included.

Expected values are go-yaml v2's (sigs.k8s.io/yaml v1.4.0 goyaml.v2/resolve.go and
decode.go), not PyYAML's: PyYAML differs on y/n, 1e3, sexagesimal 1:30 and `=`.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from tests.support import write
from trainops.kubeyaml.load import load_document
from trainops.kubeyaml.reader import LAST_WINS, REFUSE, STRICT, YamlProblem, load_first_document
from trainops.kubeyaml.scalars import key_string, resolve_plain

GO_YAML_V2 = [
    ("yes", True),
    ("Yes", True),
    ("YES", True),
    ("y", True),
    ("Y", True),
    ("on", True),
    ("ON", True),
    ("true", True),
    ("TRUE", True),
    ("no", False),
    ("n", False),
    ("N", False),
    ("off", False),
    ("Off", False),
    ("False", False),
    ("~", None),
    ("null", None),
    ("NULL", None),
    ("", None),
    ("0777", 511),
    ("00", 0),
    ("0x1F", 31),
    ("0X1f", 31),
    ("0o17", 15),
    ("0b101", 5),
    ("-0b101", -5),
    ("1_000", 1000),
    ("+1", 1),
    ("-0", 0),
    ("08", 8.0),
    ("1e3", 1000.0),
    ("1.", 1.0),
    (".5", 0.5),
    ("+.5", 0.5),
    ("9223372036854775807", 2**63 - 1),
    ("18446744073709551615", 2**64 - 1),
    ("18446744073709551616", 1.8446744073709552e19),
    ("1e400", "1e400"),
    (".INf", ".INf"),
    ("tRue", "tRue"),
    ("1:30", "1:30"),
    ("=", "="),
    ("<<", "<<"),
    ("2001-12-14", "2001-12-14"),
    ("250m", "250m"),
    ("1.16.0", "1.16.0"),
    ("0x", "0x"),
    ("_1", "_1"),
]


@pytest.mark.parametrize(("text", "expected"), GO_YAML_V2)
def test_plain_scalars_resolve_as_go_yaml_v2(text, expected):
    value = resolve_plain(text)
    assert value == expected and type(value) is type(expected), (text, value)


def test_infinities_and_nan_resolve_but_json_refuses_them():
    assert resolve_plain(".inf") == math.inf and resolve_plain("-.Inf") == -math.inf
    assert math.isnan(resolve_plain(".NaN"))
    with pytest.raises(YamlProblem, match="cannot be converted to JSON"):
        load_first_document("a: .inf\n")
    assert load_first_document(".inf: a\n") == {".inf": "a"}  # keys are strings


@pytest.mark.parametrize(
    ("key", "expected"),
    [(True, "true"), (511, "511"), (1.5, "1.5"), (1e6, "1e+06"), (0.1, "0.1"), (1e-05, "1e-05")],
)
def test_keys_become_json_strings_as_sigs_yaml_writes_them(key, expected):
    assert key_string(key) == expected


def test_explicit_tags():
    doc = load_first_document(
        "a: !!int '3'\nb: !!float 3\nc: ! 5\nd: !!str yes\ne: !!binary aGk=\n"
    )
    assert doc == {"a": 3, "b": 3.0, "c": "5", "d": "yes", "e": "hi"}
    with pytest.raises(YamlProblem, match="cannot decode !!str `x` as a !!int"):
        load_first_document("a: !!int x\n")


MERGES = """\
base: &base {image: web, port: 80}
after: {<<: *base, port: 8080}
before: {port: 8080, <<: *base}
many: {<<: [{a: 1}, {a: 2, b: 2}]}
"""


def test_merge_keys_follow_go_yaml_order():
    doc = load_first_document(MERGES)
    assert doc["after"] == {"image": "web", "port": 8080}
    assert doc["before"] == {"port": 80, "image": "web"}  # go-yaml v2: the merge comes later
    assert doc["many"] == {"a": 1, "b": 2}  # earlier maps in the list win
    with pytest.raises(YamlProblem, match="already set"):
        load_first_document(MERGES, STRICT)  # UnmarshalStrict refuses overridden keys
    with pytest.raises(YamlProblem, match="map merge requires map"):
        load_first_document("a: {<<: [1, 2]}\n")


def test_duplicate_keys_by_mode():
    text = "a: 1\nb: 2\na: 3\n"
    assert load_first_document(text, LAST_WINS) == {"a": 3, "b": 2}
    for mode in (REFUSE, STRICT):
        with pytest.raises(YamlProblem) as caught:
            load_first_document(text, mode)
        assert (caught.value.kind, caught.value.line, caught.value.key) == ("duplicate", 2, "a")


def test_anchors_may_be_redefined_and_aliases_are_copies():
    doc = load_first_document("a: &x {k: 1}\nb: *x\nc: &x 2\nd: *x\n")
    assert doc == {"a": {"k": 1}, "b": {"k": 1}, "c": 2, "d": 2}
    assert doc["a"] is not doc["b"]


TOKENS = sorted(
    {text for text, _ in GO_YAML_V2}
    | {"1", "-1", "1.5", "0.5", "10.0", "512Mi", "1Gi", "25%", "web-1", "name", "x y", "0.0.0.0"}
    | {".inf", "-.inf", ".nan", "+.inf", "0o8", "1_0.5", "-0777", "+0x1F", "1E3", ".5e3"}
)


@pytest.mark.parametrize("token", TOKENS)
def test_fast_path_never_changes_the_reading(token):
    """ryaml's shortcut gives exactly the reader's result, or the reader's error."""
    quoted = json.dumps(token)
    documents = [
        f"v: {token}\n",
        f"v: {quoted}\n",
        f"{token}: v\n",
        f"{quoted}: v\n",
        f"l: [{token}, {quoted}]\n",
        f"m:\n  k: {token}\n  {token}: k\n",
    ]
    for text in documents:
        outcomes = []
        for loader in (load_document, load_first_document):
            try:
                outcomes.append(("ok", repr(loader(text))))
            except YamlProblem as problem:
                outcomes.append(("error", problem.message))
        assert outcomes[0] == outcomes[1], text


def test_fast_path_agrees_on_every_pair_of_words():
    words = ["yes", "no", "on", "n", "0777", "1_000", "true", "1", "x", "08", ".inf"]
    for first, second in itertools.product(words, repeat=2):
        text = f"a: {first}\nb: [{second}, '{first}']\n"
        try:
            expected = repr(load_first_document(text))
        except YamlProblem as problem:
            expected = problem.message
        try:
            got = repr(load_document(text))
        except YamlProblem as problem:
            got = problem.message
        assert got == expected, text


CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: flags
data:
  enabled: {enabled}
  mode: {mode}
  perms: {perms}
"""


def test_configmap_with_yaml_11_values_is_rejected_like_kubectl(trainops, tmp_path: Path):
    """kubectl reads yes/on as booleans and 0777 as 511; ConfigMap data must be strings."""
    bad = write(tmp_path / "bad.yaml", CONFIGMAP.format(enabled="yes", mode="on", perms="0777"))
    run = trainops("validate", "--format", "json", str(bad))
    assert run.code == 1, run
    findings = json.loads(run.out)["findings"]
    paths = {f["path"] for f in findings if f["rule"] == "schema"}
    assert {"data.enabled", "data.mode", "data.perms"} <= paths, findings
    quoted = CONFIGMAP.format(enabled='"yes"', mode="'on'", perms='"0777"')
    good = write(tmp_path / "good.yaml", quoted)
    assert trainops("validate", str(good)).code == 0
    kubeconform = trainops(
        "kubeconform", "-summary", str(bad), env={"TRAINOPS_KUBECONFORM": "builtin"}
    )
    assert kubeconform.code == 1 and "Invalid: 1" in kubeconform.out


DEPLOYMENT_WITH_MERGES = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: &labels
    app: web
spec:
  selector:
    matchLabels: *labels
  template:
    metadata:
      labels:
        <<: *labels
        tier: front
    spec:
      containers:
      - &container
        name: web
        image: registry.example.com/web:1.0
        {extra}
      - <<: *container
        name: sidecar
"""


def test_merge_keys_validate_like_kubectl(trainops, tmp_path: Path):
    good = write(
        tmp_path / "good.yaml", DEPLOYMENT_WITH_MERGES.format(extra="imagePullPolicy: Always")
    )
    run = trainops("validate", str(good))
    assert run.code == 0, run
    # A field merged into the second container is checked there too.
    bad = write(tmp_path / "bad.yaml", DEPLOYMENT_WITH_MERGES.format(extra="imagePullPolicy: 7"))
    run = trainops("validate", "--format", "json", str(bad))
    assert run.code == 1
    paths = {f["path"] for f in json.loads(run.out)["findings"]}
    assert "spec.template.spec.containers[1].imagePullPolicy" in paths, paths


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "a: " + "[[]," * 20_000 + "]" * 20_000 + "\n",  # depth grows between siblings
        "data: " + "{a: " * 100_000 + "}" * 100_000 + "\n",
    ],
)
def test_deep_flow_nesting_is_refused_without_ryaml(monkeypatch, text):
    """serde_yaml needs minutes for these (its time grows with the square of the depth);
    they must go straight to the reader, which stops at the first level too deep."""

    asked: list[str] = []
    monkeypatch.setattr("trainops.kubeyaml.load.ryaml.loads", asked.append)
    with pytest.raises(YamlProblem) as caught:
        load_document(text)
    assert caught.value.kind == "depth" and caught.value.line == 0
    assert asked == []
