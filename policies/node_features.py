"""GPU node features and telemetry: Node Feature Discovery rules and dcgm-exporter metrics.

From each component's code at a pinned release: node-feature-discovery (v0.19.0) evaluates a
NodeFeatureRule's match expressions on every node, and an expression whose operator gets the
wrong number of values, a Gt/Lt value that is not an integer (or not a version with
type: version), a regexp Go does not compile, or a type other than version makes nfd-master
log "failed to process rule" and skip the rule: its labels never appear and pods selecting
them stay Pending. PCI attributes are matched as NFD reports them (lowercase hex without
0x, the class cut to 4 digits), so "0x10DE" never matches. dcgm-exporter (4.5.3-4.8.2)
reads its metrics CSV from the ConfigMap named by -m/DCGM_EXPORTER_CONFIGMAP_DATA
(<namespace>:<name>, key metrics) or from a file, and exits when the value is malformed,
the key is missing, a record does not have 3 fields, an exporter field is unknown or a
metric type is not gauge, counter, histogram, summary or label.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, argv, env_of, mapping

from .regexes import go_regexp_error

NFD_TAG = "https://github.com/kubernetes-sigs/node-feature-discovery/blob/v0.19.0/"
NFD_EXPRESSION = NFD_TAG + "pkg/apis/nfd/nodefeaturerule/expression.go#L98-L262"
NFD_MASTER = NFD_TAG + "pkg/nfd-master/nfd-master.go#L1116-L1122"
NFD_PCI = NFD_TAG + "source/pci/utils.go#L36-L50"
NFD_CRD_OPS = NFD_TAG + "api/nfd/v1alpha1/types.go#L306-L309"
DCGM_TAG = "https://github.com/NVIDIA/dcgm-exporter/blob/4.5.3-4.8.2/"
DCGM_EXTRACT = DCGM_TAG + "internal/pkg/counters/counter_config.go#L92-L144"
DCGM_CONFIGMAP = DCGM_TAG + "internal/pkg/counters/counter_config.go#L166-L191"
DCGM_EXIT = DCGM_TAG + "internal/pkg/counters/counter_config.go#L43-L54"
DCGM_FATAL = DCGM_TAG + "pkg/cmd/app.go#L941-L946"
DCGM_TYPES = DCGM_TAG + "internal/pkg/counters/variables.go#L23-L29"
DCGM_EXP_FIELDS = DCGM_TAG + "internal/pkg/counters/exporter_counters.go#L47-L62"

# -- Node Feature Discovery ----------------------------------------------------------------

NO_VALUES = {"Exists", "DoesNotExist", "IsTrue", "IsFalse"}
SOME_VALUES = {"In", "NotIn", "InRegexp"}
ONE_VALUE = {"Gt", "Ge", "Lt", "Le"}
TWO_VALUES = {"GtLt", "GeLe"}
OPS = NO_VALUES | SOME_VALUES | ONE_VALUE | TWO_VALUES
GO_ATOI = re.compile(r"^[+-]?\d+$")
# Masterminds/semver v3 NewVersion (the lenient form: v prefix, major[.minor[.patch]]).
SEMVER = re.compile(
    r"^v?(\d+)(\.\d+)?(\.\d+)?(-([0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*))?"
    r"(\+([0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*))?$"
)
PCI_HEX = {"vendor": 4, "device": 4, "subsystem_vendor": 4, "subsystem_device": 4, "class": 4}
# Feature elements whose values are never integers (Gt/Lt without type: version fails).
NOT_INTEGER = {("kernel.version", "full")}


def _expression_problem(feature: str, name: str, expr: dict[str, Any]) -> str | None:
    op = expr.get("op")
    values = expr.get("value")
    if values is None:
        values = []
    if not isinstance(op, str) or not isinstance(values, list):
        return None
    kind = expr.get("type") or ""
    if any(common_templated(v) for v in [op, kind, *values]):
        return None
    values = [str(v) for v in values]
    if op not in OPS:
        return f"op {op!r} is none of {', '.join(sorted(OPS))}"
    if op in NO_VALUES:
        return f"{op} takes no value (has {values})" if values else None
    if op in SOME_VALUES:
        if not values:
            return f"{op} needs at least one value"
        if op == "InRegexp":
            for value in values:
                why = go_regexp_error(value)
                if why:
                    return f"InRegexp value {value!r} does not compile ({why})"
        return None
    want = 1 if op in ONE_VALUE else 2
    if len(values) != want:
        return f"{op} takes exactly {want} value{'s' if want > 1 else ''} (has {values})"
    if kind == "version":
        for value in values:
            if not SEMVER.match(value):
                return f"{value!r} is not a version"
        return None
    if kind:
        return f"type {kind!r}: only 'version' is accepted"
    for value in values:
        if not GO_ATOI.match(value):
            return f"{op} compares integers and {value!r} is not one (add type: version?)"
    if want == 2 and int(values[0]) >= int(values[1]):
        return f"{op} needs value[0] < value[1] (has {values})"
    if (feature, name) in NOT_INTEGER:
        return f"{feature}.{name} is not an integer: compare it with type: version"
    return None


def common_templated(value: Any) -> bool:
    text = str(value)
    return "{{" in text or "$(" in text


def _pci_problems(feature: str, name: str, expr: dict[str, Any]) -> list[str]:
    if feature != "pci.device" or name not in PCI_HEX:
        return []
    if expr.get("op") not in ("In", "NotIn"):
        return []
    out = []
    for value in expr.get("value") or []:
        text = str(value)
        if common_templated(text):
            return []
        if not re.fullmatch(f"[0-9a-f]{{{PCI_HEX[name]}}}", text):
            out.append(text)
    return out


def _matchers(spec: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(path, rule) of the rules of a NodeFeatureRule or NodeFeatureGroup."""
    for field in ("rules", "featureGroupRules"):
        for index, rule in enumerate(spec.get(field) or []):
            if isinstance(rule, dict):
                yield ("spec", field, index), rule


def _terms(rule: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    for index, term in enumerate(rule.get("matchFeatures") or []):
        if isinstance(term, dict):
            yield ("matchFeatures", index), term
    for at, element in enumerate(rule.get("matchAny") or []):
        for index, term in enumerate(mapping(element).get("matchFeatures") or []):
            if isinstance(term, dict):
                yield ("matchAny", at, "matchFeatures", index), term


def _expressions(
    term: dict[str, Any],
) -> Iterator[tuple[tuple[Any, ...], str, dict[str, Any]]]:
    for name, expr in mapping(term.get("matchExpressions")).items():
        if isinstance(expr, dict):
            yield ("matchExpressions", name), str(name), expr
    if isinstance(term.get("matchName"), dict):
        yield ("matchName",), "", term["matchName"]


@resource_rule(
    id="nfd-rule-expression",
    severity=ERROR,
    title="NodeFeatureRule match expressions are ones nfd-master can evaluate",
    why="nfd-master evaluates each rule's expressions on every node; an operator that gets "
    "the wrong number of values (Exists with values, In with none, Gt with two, GtLt with "
    "one), a Gt/Lt/GtLt value that is not an integer without type: version, a version that "
    "does not parse, a type other than version or a regexp Go does not compile fails the "
    "rule: nfd-master logs 'failed to process rule' and skips it, its labels never appear "
    "and the pods selecting them stay Pending.",
    fix="Give Exists/DoesNotExist/IsTrue/IsFalse no value, In/NotIn/InRegexp at least one, "
    "Gt/Ge/Lt/Le exactly one and GtLt/GeLe two increasing ones; compare versions "
    "(kernel.version.full, driver versions) with type: version.",
    kinds=("NodeFeatureRule", "NodeFeatureGroup"),
    source=(NFD_EXPRESSION, NFD_MASTER, NFD_CRD_OPS),
)
def nfd_rule_expression(doc: Document, ctx: Context) -> Iterator[Violation]:
    for rule_path, rule in _matchers(mapping(doc.obj.get("spec"))):
        for term_path, term in _terms(rule):
            feature = str(term.get("feature") or "")
            for expr_path, name, expr in _expressions(term):
                why = _expression_problem(feature, name, expr)
                if why:
                    label = f"{feature}.{name}" if name else f"{feature} matchName"
                    yield Violation(
                        f"rule {rule.get('name')!r}, {label}: {why}: nfd-master skips the "
                        "rule and its labels never appear",
                        (*rule_path, *term_path, *expr_path),
                    )


@resource_rule(
    id="nfd-pci-id-format",
    severity=ERROR,
    title="NodeFeatureRules match PCI ids as NFD reports them",
    why="NFD's pci source reports vendor, device and subsystem ids as 4 lowercase hex digits "
    "without 0x (the sysfs file with its 0x prefix stripped) and the class cut to its first 4 "
    "digits; an In value such as 0x10de, 10DE or 030000 never equals them, so the rule never "
    "matches, its labels never appear and GPU pods selecting them stay Pending.",
    fix='Write vendor: {op: In, value: ["10de"]} and class: {op: In, value: ["0302", "0300"]}.',
    kinds=("NodeFeatureRule", "NodeFeatureGroup"),
    source=NFD_PCI,
    when={
        "error": "every value of an In expression is written otherwise",
        "warning": "some values are (those never match, or NotIn excludes nothing with them)",
    },
)
def nfd_pci_id_format(doc: Document, ctx: Context) -> Iterator[Violation]:
    for rule_path, rule in _matchers(mapping(doc.obj.get("spec"))):
        for term_path, term in _terms(rule):
            feature = str(term.get("feature") or "")
            for expr_path, name, expr in _expressions(term):
                bad = _pci_problems(feature, name, expr)
                if not bad:
                    continue
                every = expr.get("op") == "In" and len(bad) == len(expr.get("value") or [])
                yield Violation(
                    f"rule {rule.get('name')!r}, pci.device {name} {expr.get('op')} {bad}: NFD "
                    f"reports {PCI_HEX[name]} lowercase hex digits without 0x, so "
                    + ("the rule never matches" if every else "these values never match"),
                    (*rule_path, *term_path, *expr_path, "value"),
                    severity=None if every else WARNING,
                )


# -- dcgm-exporter -----------------------------------------------------------------------

PROM_TYPES = {"gauge", "counter", "histogram", "summary", "label"}
EXPORTER_FIELDS = {
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS",
    "DCGM_EXP_P2P_STATUS",
    "DCGM_FI_UNKNOWN",
}
DCGM_LINE = re.compile(r"^\s*DCGM_(FI|EXP)_[A-Z0-9_]+\s*,", re.M)


def metrics_problems(text: str, from_configmap: bool) -> list[str] | None:
    """Why dcgm-exporter refuses a metrics CSV (None: not one it can be sure about)."""
    if '"' in text or common_templated(text):
        return None
    problems: list[str] = []
    records = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue  # encoding/csv skips empty lines
        if line.lstrip().startswith("#"):
            continue
        records += 1
        fields = [f.strip(" ") for f in next(csv.reader(io.StringIO(line)))]
        if len(fields) != 3:
            problems.append(f"line {number} has {len(fields)} fields, not 3")
            continue
        name, kind = fields[0], fields[1]
        if name.startswith("DCGM_EXP_") and name not in EXPORTER_FIELDS:
            problems.append(f"line {number}: {name} is no DCGM or exporter field")
        elif not name.startswith(("DCGM_", "dcgm_")):
            problems.append(f"line {number}: {name!r} is no DCGM field")
        elif (
            name.startswith("DCGM_FI_")
            and not name.startswith("DCGM_FI_PROF_")
            and kind not in PROM_TYPES
        ):
            problems.append(f"line {number}: {name} has metric type {kind!r}")
    if from_configmap and records == 0:
        problems.append("it holds no metrics")
    return problems


def _csv_keys(doc: Document) -> Iterator[tuple[str, str]]:
    for key, value in mapping(doc.obj.get("data")).items():
        if not isinstance(value, str):
            continue
        if (key == "metrics" or str(key).endswith(".csv")) and DCGM_LINE.search(value):
            yield str(key), value


def has_dcgm_csv(doc: Document) -> bool:
    return any(True for _ in _csv_keys(doc))


@resource_rule(
    id="dcgm-exporter-metrics",
    severity=ERROR,
    title="dcgm-exporter metrics CSVs are ones the exporter loads",
    why="dcgm-exporter reads its metrics list as CSV (from the ConfigMap key metrics or the "
    "-f file): a record without exactly 3 fields (field, type, help), a DCGM_EXP_ field it "
    "does not know, a name that is no DCGM field, or a metric type other than gauge, counter, "
    "histogram, summary or label makes it exit at start: the exporter crash-loops and no GPU "
    "metrics reach Prometheus.",
    fix="Write each line as DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %). and start "
    "comments with # in the first column.",
    kinds=("ConfigMap",),
    applies=has_dcgm_csv,
    source=(DCGM_EXTRACT, DCGM_TYPES, DCGM_EXP_FIELDS, DCGM_FATAL),
)
def dcgm_exporter_metrics(doc: Document, ctx: Context) -> Iterator[Violation]:
    for key, text in _csv_keys(doc):
        for problem in metrics_problems(text, key == "metrics") or []:
            yield Violation(
                f"{key}: {problem}: dcgm-exporter refuses the metrics list and exits",
                ("data", key),
            )


CONFIGMAP_ENV = "DCGM_EXPORTER_CONFIGMAP_DATA"


def _configmap_flag(container: dict[str, Any]) -> tuple[str, tuple[Any, ...]] | None:
    """The -m / --configmap-data value (the command line wins over the environment)."""
    words = argv(container)
    exporter = "dcgm-exporter" in str(container.get("image", "")) or any(
        "dcgm-exporter" in word for word in words[:1]
    )
    for index, word in enumerate(words if exporter else []):
        for flag in ("-m", "--m", "-configmap-data", "--configmap-data"):
            if word == flag and index + 1 < len(words):
                return words[index + 1], ("args",)
            if word.startswith(flag + "="):
                return word[len(flag) + 1 :], ("args",)
    value = env_of(container).get(CONFIGMAP_ENV)
    if value is not None:
        return value, ("env",)
    return None


def runs_dcgm_exporter(pod: PodTemplate) -> bool:
    for _, _, container in pod.all_containers:
        if "dcgm-exporter" in str(container.get("image", "")) or _configmap_flag(container):
            return True
    return False


@pod_rule(
    id="dcgm-exporter-configmap",
    severity=ERROR,
    title="dcgm-exporter's metrics ConfigMap is named as <namespace>:<name> and has a metrics key",
    why="dcgm-exporter reads -m / DCGM_EXPORTER_CONFIGMAP_DATA as <namespace>:<name> and the "
    "ConfigMap's key metrics: a value without exactly one ':' or a ConfigMap without that key "
    "makes it exit at start (it does not fall back to the -f file), so the exporter "
    "crash-loops and no GPU metrics are scraped.",
    fix="Set DCGM_EXPORTER_CONFIGMAP_DATA to <namespace>:<name> of a ConfigMap whose data has "
    "the CSV under the key metrics.",
    applies=runs_dcgm_exporter,
    source=(DCGM_CONFIGMAP, DCGM_EXIT),
)
def dcgm_exporter_configmap(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for key, index, container in pod.all_containers:
        found = _configmap_flag(container)
        if found is None:
            continue
        value, where = found
        if value == "none" or common_templated(value) or not value:
            continue
        path = (*pod.path, key, index, *where)
        parts = value.split(":")
        if len(parts) != 2:
            yield Violation(
                f"configmap-data {value!r} is not <namespace>:<name>: dcgm-exporter exits at start",
                path,
            )
            continue
        configmap = ctx.find("ConfigMap", parts[1], parts[0])
        if configmap is None:
            continue
        data = mapping(configmap.obj.get("data"))
        if "metrics" not in data:
            yield Violation(
                f"ConfigMap {value} has no key metrics (it has {sorted(data) or 'none'}): "
                "dcgm-exporter exits at start",
                path,
            )
