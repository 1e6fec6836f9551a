"""Dynamic provisioners of training storage, checked as each one's own code checks them.

From each provisioner's code at a pinned release: Rancher's local-path-provisioner (v0.0.37)
loads config.json from its ConfigMap (local-path-config) and refuses a node path that is not
absolute, is the root or is listed twice; it fails every claim of a config that sets both
nodePathMap and sharedFileSystemPath (or neither), of a class storageClassConfigs does not
name, of a nodePath no node lists, of a pathPattern that does not render
<namespace>/<claim>/ first, and, on node paths, of any access mode but ReadWriteOnce(Pod).
The AWS EFS CSI driver (v3.4.1) fails CreateVolume for a StorageClass parameter it cannot
parse (provisioningMode, the file system id, the gid range, booleans, subPathPattern), so
the claims of the class stay Pending. A claim is followed to its StorageClass and the
provisioner's ConfigMap through the render's indexes.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import mapping

LOCAL_PATH = "rancher.io/local-path"
# The Helm chart's default provisioner name: cluster.local/<release fullname>.
LOCAL_PATH_CHART = re.compile(r"^cluster\.local/[\w.-]*local-path-provisioner[\w.-]*$")
LOCAL_PATH_TAG = "https://github.com/rancher/local-path-provisioner/blob/v0.0.37/"
LP_CANONICALIZE = LOCAL_PATH_TAG + "provisioner.go#L918-L950"
LP_LOAD = LOCAL_PATH_TAG + "provisioner.go#L866-L888"
LP_START = LOCAL_PATH_TAG + "provisioner.go#L145-L147"
LP_SHARED = LOCAL_PATH_TAG + "provisioner.go#L272-L293"
LP_PICK = LOCAL_PATH_TAG + "provisioner.go#L295-L304"
LP_NODE_PATH = LOCAL_PATH_TAG + "provisioner.go#L254-L260"
LP_PATTERN = LOCAL_PATH_TAG + "provisioner.go#L311-L339"
LP_ACCESS = LOCAL_PATH_TAG + "provisioner.go#L377-L389"
LP_VOLUME_TYPE = LOCAL_PATH_TAG + "provisioner.go#L952-L977"

EFS = "efs.csi.aws.com"
EFS_TAG = "https://github.com/kubernetes-sigs/aws-efs-csi-driver/blob/v3.4.1/"
EFS_CREATE = EFS_TAG + "pkg/driver/controller.go#L103-L218"
EFS_CONSTRAINTS = EFS_TAG + "pkg/driver/controller.go#L804-L869"
EFS_AZ = EFS_TAG + "pkg/driver/controller.go#L275-L281"
EFS_SUBPATH = EFS_TAG + "pkg/driver/controller.go#L722-L733"
EFS_PATH_LIMITS = EFS_TAG + "pkg/driver/controller.go#L790-L800"
EFS_FS_ID = EFS_TAG + "pkg/driver/filesystem_id_finder.go#L44-L62"
EFS_MODES = EFS_TAG + "pkg/driver/node.go#L42-L46"

GO_BOOLS = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
INTEGER = re.compile(r"^[+-]?\d+$")


def _templated(value: Any) -> bool:
    text = str(value)
    return "{{" in text or "$(" in text or "${" in text


# -- local-path-provisioner: the ConfigMap -----------------------------------------------


@dataclass(frozen=True)
class ClassConfig:
    node_paths: dict[str, set[str]]  # node -> cleaned paths
    shared: str


@dataclass(frozen=True)
class LocalPathConfig:
    doc: Document
    default: ClassConfig | None  # None when storageClassConfigs is used
    per_class: dict[str, ClassConfig]
    problems: tuple[str, ...]  # why the provisioner refuses the config (empty: it loads)


def _key(obj: dict[str, Any], name: str) -> Any:
    """encoding/json matches field names case-insensitively (an exact match first)."""
    if name in obj:
        return obj[name]
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == name.lower():
            return value
    return None


def _clean(path: str) -> str:
    cleaned = posixpath.normpath(re.sub(r"/+", "/", path))
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


def _class_config(data: Any, where: str, problems: list[str]) -> ClassConfig:
    data = data if isinstance(data, dict) else {}
    shared = _key(data, "sharedFileSystemPath")
    if shared is not None and not isinstance(shared, str):
        problems.append(f"{where}sharedFileSystemPath is not a string")
        shared = ""
    node_paths: dict[str, set[str]] = {}
    entries = _key(data, "nodePathMap")
    if entries is not None and not isinstance(entries, list):
        problems.append(f"{where}nodePathMap is not a list")
        entries = []
    for entry in entries or []:
        if entry is None:
            entry = {}
        if not isinstance(entry, dict):
            problems.append(f"{where}nodePathMap holds {entry!r}, not an object")
            continue
        node = _key(entry, "node") or ""
        paths = _key(entry, "paths") or []
        if not isinstance(node, str) or not isinstance(paths, list):
            problems.append(f"{where}nodePathMap entry {entry!r} has the wrong types")
            continue
        if node in node_paths:
            problems.append(f"{where}node {node!r} is listed twice in nodePathMap")
            continue
        cleaned: set[str] = set()
        node_paths[node] = cleaned
        for path in paths:
            if not isinstance(path, str):
                problems.append(f"{where}path {path!r} on node {node!r} is not a string")
            elif path == "":
                problems.append(f"{where}an empty path on node {node!r} crashes the provisioner")
            elif not path.startswith("/"):
                problems.append(f"{where}path {path!r} on node {node!r} does not start with /")
            elif _clean(path) == "/":
                problems.append(f"{where}the root / is a path on node {node!r}")
            elif _clean(path) in cleaned:
                problems.append(f"{where}path {path!r} is listed twice on node {node!r}")
            else:
                cleaned.add(_clean(path))
    return ClassConfig(node_paths, shared or "")


def _parse_local_path(doc: Document) -> LocalPathConfig | None:
    text = mapping(doc.obj.get("data")).get("config.json")
    if not isinstance(text, str) or _templated(text):
        return None
    problems: list[str] = []
    try:
        # json.Decoder.Decode (the --config file) reads the first value and ignores the rest.
        data, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError as error:
        return LocalPathConfig(doc, None, {}, (f"config.json is not JSON ({error})",))
    if not isinstance(data, dict):
        return LocalPathConfig(doc, None, {}, ("config.json is not a JSON object",))
    timeout = _key(data, "cmdTimeoutSeconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
        problems.append("cmdTimeoutSeconds is not an integer")
    for name in ("setupCommand", "teardownCommand"):
        value = _key(data, name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{name} is not a string")
    classes = _key(data, "storageClassConfigs")
    if classes is not None and not isinstance(classes, dict):
        problems.append("storageClassConfigs is not an object")
        classes = {}
    per_class: dict[str, ClassConfig] = {}
    default = None
    if classes:
        for name, value in classes.items():
            per_class[str(name)] = _class_config(value, f"storageClassConfigs.{name}: ", problems)
    else:
        default = _class_config(data, "", problems)
    return LocalPathConfig(doc, default, per_class, tuple(problems))


def is_local_path_config(doc: Document) -> bool:
    data = mapping(doc.obj.get("data"))
    if "config.json" not in data:
        return False
    return doc.name == "local-path-config" or "helperPod.yaml" in data


def _local_path_configs(ctx: Context) -> list[LocalPathConfig]:
    def compute() -> list[LocalPathConfig]:
        out = []
        for doc in ctx.of_kind("ConfigMap"):
            if is_local_path_config(doc):
                parsed = _parse_local_path(doc)
                if parsed is not None:
                    out.append(parsed)
        return out

    return ctx.memo("local-path-configs", compute)


def _the_config(ctx: Context) -> LocalPathConfig | None:
    """The render's one local-path config (None: none, several, or one that does not load)."""
    configs = _local_path_configs(ctx)
    if len(configs) != 1 or configs[0].problems:
        return None
    return configs[0]


def _config_for(config: LocalPathConfig, class_name: str) -> ClassConfig | None:
    if config.default is not None:
        return config.default
    return config.per_class.get(class_name)


def _mode_problem(config: ClassConfig) -> str | None:
    if config.shared and config.node_paths:
        return "sets both nodePathMap and sharedFileSystemPath"
    if not config.shared and not config.node_paths:
        return "sets neither nodePathMap nor sharedFileSystemPath"
    return None


@resource_rule(
    id="local-path-config",
    severity=ERROR,
    title="The local-path-provisioner's config.json is one it loads and can provision from",
    why="local-path-provisioner reads config.json from its ConfigMap at start and every 30s: "
    "JSON that does not decode into its config, a nodePathMap path that does not start with /, "
    "the root /, or a node or path listed twice make it refuse the config (it does not start, "
    "a running one keeps the old config); a config with both nodePathMap and "
    "sharedFileSystemPath, or neither, loads but fails every claim, which stays Pending.",
    fix="Give each node (or DEFAULT_PATH_FOR_NON_LISTED_NODES) distinct absolute paths under a "
    "data disk, and set either nodePathMap or sharedFileSystemPath, not both.",
    kinds=("ConfigMap",),
    applies=is_local_path_config,
    source=(LP_LOAD, LP_CANONICALIZE, LP_START, LP_SHARED),
)
def local_path_config(doc: Document, ctx: Context) -> Iterator[Violation]:
    parsed = _parse_local_path(doc)
    if parsed is None:
        return
    path = ("data", "config.json")
    for problem in parsed.problems:
        yield Violation(
            f"config.json: {problem}: local-path-provisioner refuses the config and does not start",
            path,
        )
    if parsed.problems:
        return
    configs = [("", parsed.default)] if parsed.default else sorted(parsed.per_class.items())
    for name, config in configs:
        problem = _mode_problem(config) if config is not None else None
        if problem:
            where = f"storageClassConfigs.{name} " if name else "config.json "
            yield Violation(
                f"{where}{problem}: local-path-provisioner fails every claim it is asked for",
                path,
            )


# -- local-path-provisioner: StorageClasses and claims -----------------------------------


def is_local_path_class(doc: Document) -> bool:
    provisioner = doc.obj.get("provisioner")
    return isinstance(provisioner, str) and (
        provisioner == LOCAL_PATH or bool(LOCAL_PATH_CHART.match(provisioner))
    )


OBJECT_META = {
    "Name", "GenerateName", "Namespace", "SelfLink", "UID", "ResourceVersion", "Generation",
    "CreationTimestamp", "DeletionTimestamp", "DeletionGracePeriodSeconds", "Labels",
    "Annotations", "OwnerReferences", "Finalizers", "ManagedFields",
}  # fmt: skip
ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.S)
FIELD = re.compile(r"(?:^|[\s(])(\.[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
DOT_CHANGING = re.compile(r"^\s*(with|range|define|template|block)\b")
SIMPLE = {".PVC.Namespace": "ns", ".PVC.Name": "name", ".PVName": "pv"}


def _pattern_fields(pattern: str) -> tuple[str | None, list[tuple[str, Any]]]:
    """(a reason text/template refuses the pattern, or None; its tokens)."""
    tokens: list[tuple[str, Any]] = []
    position = 0
    trim_next = False
    for found in ACTION.finditer(pattern):
        literal = pattern[position : found.start()]
        literal = literal.lstrip() if trim_next else literal
        if found.group(0).startswith("{{- "):
            literal = literal.rstrip()
        tokens.append(("lit", literal))
        tokens.append(("act", found.group(1).strip()))
        trim_next = found.group(0).endswith(" -}}")
        position = found.end()
    rest = pattern[position:]
    tokens.append(("lit", rest.lstrip() if trim_next else rest))
    if any("{{" in value for kind, value in tokens if kind == "lit"):
        return "an action {{ is not closed", tokens
    actions = [value for kind, value in tokens if kind == "act"]
    if any(DOT_CHANGING.match(a) or "$" in a or a.startswith("/*") for a in actions):
        return None, tokens
    for action in actions:
        bare = re.sub(r'"(?:\\.|[^"\\])*"|`[^`]*`', '""', action)
        for chain in FIELD.findall(bare):
            parts = chain.split(".")[1:]
            if parts[0] not in ("PVName", "PVC"):
                return f"{chain} is no field of the pattern's data (.PVName, .PVC)", tokens
            if parts[0] == "PVName" and len(parts) > 1:
                return f"{chain}: .PVName is a string", tokens
            if parts[0] == "PVC" and len(parts) > 1 and parts[1] not in OBJECT_META:
                if parts[1].startswith(("Get", "Set")):
                    continue  # ObjectMeta's methods: not sure how the template resolves them
                return f"{chain} is no field of the claim's metadata", tokens
    return None, tokens


def _prefix_fails(tokens: list[tuple[str, Any]]) -> bool:
    """Whether the pattern certainly renders without the <namespace>/<claim>/ prefix."""
    stream: list[str] = []  # "ns", "name", "pv", "?" or single literal characters
    for kind, value in tokens:
        if kind == "lit":
            stream.extend(value)
        else:
            stream.append(SIMPLE.get(value, "?"))
            if stream[-1] == "?":
                break
    expected = ["ns", "/", "name", "/"]
    for index, want in enumerate(expected):
        if index >= len(stream):
            return True  # the pattern ends before the prefix
        got = stream[index]
        if got == "?":
            return False
        if want == "/":
            if got != "/":
                return True
        elif want == "ns":
            if got == "pv":
                return True
            if got in ("name",) or (len(got) == 1 and re.match(r"[a-z0-9]", got)):
                return False  # a claim named like its namespace, or a literal namespace
            if got != "ns":
                return True
        else:  # the claim name
            if got == "pv":
                return True
            if len(got) == 1 and not re.match(r"[a-z0-9]", got):
                return True  # a claim's name starts with a letter or digit
            if got != "name":
                return False  # a literal (or the namespace) may equal the claim's name
    return False


def _unsafe_allowed(doc: Document) -> bool:
    parameters = mapping(doc.obj.get("parameters"))
    if "allowUnsafePathPattern" in parameters:
        return str(parameters["allowUnsafePathPattern"]) in GO_TRUE
    annotations = mapping(mapping(doc.obj.get("metadata")).get("annotations"))
    return str(annotations.get("allowUnsafePathPattern")) in GO_TRUE


VOLUME_TYPES = ("local", "hostpath")


@resource_rule(
    id="local-path-storage-class",
    severity=ERROR,
    title="local-path StorageClasses ask for what the provisioner can create",
    why="local-path-provisioner fails every claim of a class whose pathPattern does not parse, "
    "names a field its data lacks, or does not render {{ .PVC.Namespace }}/{{ .PVC.Name }}/ "
    "first; of a class storageClassConfigs does not list; of a nodePath no node of the config "
    "lists; and of a defaultVolumeType other than local or hostPath. Its claims stay Pending.",
    fix='Write pathPattern: "{{ .PVC.Namespace }}/{{ .PVC.Name }}/...", list the class in '
    "storageClassConfigs, use a nodePath exactly as nodePathMap lists it, and "
    "defaultVolumeType: hostPath or local.",
    kinds=("StorageClass",),
    applies=is_local_path_class,
    source=(LP_PATTERN, LP_PICK, LP_NODE_PATH, LP_VOLUME_TYPE),
)
def local_path_storage_class(doc: Document, ctx: Context) -> Iterator[Violation]:
    parameters = mapping(doc.obj.get("parameters"))
    pattern = parameters.get("pathPattern")
    if isinstance(pattern, str) and "$(" not in pattern:
        problem, tokens = _pattern_fields(pattern)
        if problem:
            yield Violation(
                f"pathPattern {pattern!r}: {problem}: every claim of the class fails",
                ("parameters", "pathPattern"),
            )
        elif not _unsafe_allowed(doc) and _prefix_fails(tokens):
            yield Violation(
                f"pathPattern {pattern!r} does not render <namespace>/<claim>/ first: the "
                "provisioner refuses the path and every claim of the class stays Pending",
                ("parameters", "pathPattern"),
            )
    annotations = mapping(mapping(doc.obj.get("metadata")).get("annotations"))
    volume_type = annotations.get("defaultVolumeType")
    unsure = volume_type is None or _templated(volume_type)
    if not unsure and str(volume_type).lower() not in VOLUME_TYPES:
        yield Violation(
            f"defaultVolumeType {volume_type!r} is neither hostPath nor local: the "
            "provisioner fails every claim of the class",
            ("metadata", "annotations", "defaultVolumeType"),
        )
    config = _the_config(ctx)
    if config is None:
        return
    class_config = _config_for(config, doc.name)
    if class_config is None:
        yield Violation(
            f"the local-path config {config.doc.namespace}/{config.doc.name} has "
            f"storageClassConfigs without {doc.name}: the provisioner fails every claim of the "
            "class",
            ("metadata", "name"),
        )
        return
    node_path = parameters.get("nodePath")
    if (
        isinstance(node_path, str)
        and node_path
        and not _templated(node_path)
        and class_config.node_paths
        and not class_config.shared
        and not any(node_path in paths for paths in class_config.node_paths.values())
    ):
        yield Violation(
            f"nodePath {node_path!r} is on no node of the local-path config's nodePathMap: the "
            "provisioner fails every claim of the class",
            ("parameters", "nodePath"),
        )


NODE_MODES = {"ReadWriteOnce", "ReadWriteOncePod"}


def _local_path_class_of(doc: Document, ctx: Context) -> Document | None:
    name = mapping(doc.obj.get("spec")).get("storageClassName")
    if not isinstance(name, str) or not name:
        return None
    found = ctx.find("StorageClass", name)
    return found if found is not None and is_local_path_class(found) else None


@resource_rule(
    id="local-path-claim",
    severity=ERROR,
    title="Claims of a local-path class are ones the provisioner can satisfy",
    why="On node paths (nodePathMap) local-path-provisioner offers only ReadWriteOnce and "
    "ReadWriteOncePod and no label selector: a ReadWriteMany or ReadOnlyMany claim, or one "
    "with spec.selector, fails to provision and stays Pending; so does a claim whose "
    "volumeType annotation is neither local nor hostPath.",
    fix="Use ReadWriteOnce for a node-local volume (or a sharedFileSystemPath config, or an "
    "RWX file system class for data several nodes read), drop spec.selector, and set "
    "volumeType: local or hostPath.",
    kinds=("PersistentVolumeClaim",),
    source=(LP_ACCESS, LP_VOLUME_TYPE),
    when={
        "error": "the render's local-path config uses nodePathMap",
        "warning": "the render has no local-path config (the default one uses node paths)",
    },
)
def local_path_claim(doc: Document, ctx: Context) -> Iterator[Violation]:
    storage_class = _local_path_class_of(doc, ctx)
    if storage_class is None:
        return
    spec = mapping(doc.obj.get("spec"))
    if spec.get("volumeName"):
        return  # bound to a PersistentVolume already
    annotations = mapping(mapping(doc.obj.get("metadata")).get("annotations"))
    volume_type = annotations.get("volumeType")
    unsure = volume_type is None or _templated(volume_type)
    if not unsure and str(volume_type).lower() not in VOLUME_TYPES:
        yield Violation(
            f"volumeType {volume_type!r} is neither hostPath nor local: the provisioner "
            "fails the claim",
            ("metadata", "annotations", "volumeType"),
        )
    severity = None
    if _local_path_configs(ctx):
        config = _the_config(ctx)
        if config is None:
            return
        class_config = _config_for(config, storage_class.name)
        if class_config is None or class_config.shared or not class_config.node_paths:
            return  # shared file system (any mode), or already reported on the class
    else:
        severity = WARNING
    modes = sorted({str(m) for m in spec.get("accessModes") or []} - NODE_MODES)
    for mode in modes:
        if _templated(mode):
            continue
        yield Violation(
            f"{mode} on local-path class {storage_class.name}: on node paths the provisioner "
            "offers only ReadWriteOnce(Pod) and fails the claim",
            ("spec", "accessModes"),
            severity=severity,
        )
    if spec.get("selector") and not modes:
        yield Violation(
            f"spec.selector on a claim of local-path class {storage_class.name}: the "
            "provisioner does not support selectors on node paths and fails the claim",
            ("spec", "selector"),
            severity=severity,
        )


# -- AWS EFS CSI driver --------------------------------------------------------------------

EFS_PROVISIONING_MODES = ("efs-ap", "s3files-ap")
# Replaced by nothing: the shortest and shallowest directory the driver can make (the
# values are empty when the external-provisioner passes no claim metadata).
EFS_SUBPATH_VARIABLES = ("${.PVC.name}", "${.PVC.namespace}", "${.PV.name}")


def _efs_problems(parameters: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(parameter, why CreateVolume fails) for an EFS StorageClass's parameters."""
    text = {str(k): str(v) for k, v in parameters.items() if v is not None}
    for key in ("reuseAccessPoint", "enforceZoneAffinity", "enableTagging"):
        if key in text and text[key] not in GO_BOOLS:
            yield key, f"{text[key]!r} is not a boolean"
    refs = [
        k for k in ("fileSystemId", "fileSystemIdConfigRef", "fileSystemIdSecretRef")
        if text.get(k, "").strip()
    ]  # fmt: skip
    if len(refs) > 1:
        yield refs[1], "only one of fileSystemId, fileSystemIdConfigRef, fileSystemIdSecretRef"
    elif not refs:
        yield "fileSystemId", "no fileSystemId (nor fileSystemIdConfigRef/SecretRef) is set"
    elif refs[0] != "fileSystemId":
        parts = [p.strip() for p in text[refs[0]].strip().split("/")]
        if len(parts) != 3 or not all(parts):
            yield refs[0], f"{text[refs[0]]!r} is not namespace/name/key"
    mode = text.get("provisioningMode")
    if mode is None:
        yield "provisioningMode", "it is missing (efs-ap or s3files-ap)"
    elif mode not in EFS_PROVISIONING_MODES:
        yield "provisioningMode", f"{mode!r} is neither efs-ap nor s3files-ap"
    elif mode == "s3files-ap":
        for key in ("reuseAccessPoint", "az"):
            if key in text:
                yield key, "it is only supported for EFS file systems, not s3files-ap"
    for key in ("uid", "gid"):
        if key in text:
            if not INTEGER.match(text[key]):
                yield key, f"{text[key]!r} is not an integer"
            elif int(text[key]) < 0:
                yield key, "it must be 0 or more"
    start = text.get("gidRangeStart")
    end = text.get("gidRangeEnd")
    low = None
    if start is not None:
        if not INTEGER.match(start):
            yield "gidRangeStart", f"{start!r} is not an integer"
            return
        low = int(start)
        if low <= 0:
            yield "gidRangeStart", "it must be greater than 0"
            return
    if end is not None:
        if low is None:
            yield "gidRangeEnd", "gidRangeEnd needs gidRangeStart"
        elif not INTEGER.match(end):
            yield "gidRangeEnd", f"{end!r} is not an integer"
        elif int(end) <= low:
            yield "gidRangeEnd", f"{end} is not greater than gidRangeStart {low}"
    elif low is not None:
        yield "gidRangeStart", "gidRangeStart needs gidRangeEnd"
    yield from _efs_path_problems(text)


UID = "00000000-0000-0000-0000-000000000000"


def _efs_path_problems(text: dict[str, str]) -> Iterator[tuple[str, str]]:
    pattern = text.get("subPathPattern")
    root = "pvc-" + UID  # the PV name
    if pattern is not None:
        rendered = pattern
        for variable in EFS_SUBPATH_VARIABLES:
            rendered = rendered.replace(variable, "")
        if "${" in rendered or "}" in rendered:
            yield (
                "subPathPattern",
                (
                    f"{pattern!r} has elements other than ${{.PVC.name}}, ${{.PVC.namespace}}, "
                    "${.PV.name}"
                ),
            )
            return
        root = rendered
        if text.get("ensureUniqueDirectory") not in GO_BOOLS - GO_TRUE:
            root += "-" + UID
    base = text.get("basePath", "")
    joined = _clean("/" + base + "/" + root)
    if joined.count("/") > 5:
        yield (
            "subPathPattern" if pattern is not None else "basePath",
            (
                f"the access point directory {joined.replace(UID, '<uid>')} is deeper than "
                "the 4 subdirectories the driver allows"
            ),
        )
    elif len(joined) > 100:
        yield (
            "subPathPattern" if pattern is not None else "basePath",
            (
                f"the access point directory has at least {len(joined)} characters, over the "
                "driver's 100"
            ),
        )


@resource_rule(
    id="efs-storage-class",
    severity=ERROR,
    title="EFS StorageClasses have parameters the driver's CreateVolume parses",
    why="The EFS CSI driver creates an access point per claim from the StorageClass "
    "parameters: without provisioningMode efs-ap (or s3files-ap) or one file system id, with "
    "a boolean, uid, gid or gid range that does not parse (or gidRangeStart without "
    "gidRangeEnd), or with a subPathPattern of unknown ${...} elements or a path deeper than "
    "4 directories, CreateVolume fails with InvalidArgument and every claim stays Pending.",
    fix="Set provisioningMode: efs-ap and fileSystemId: fs-..., gidRangeStart and gidRangeEnd "
    'together, booleans as "true"/"false", and build subPathPattern only from '
    "${.PVC.namespace}, ${.PVC.name} and ${.PV.name}.",
    kinds=("StorageClass",),
    source=(EFS_CREATE, EFS_CONSTRAINTS, EFS_SUBPATH, EFS_PATH_LIMITS, EFS_FS_ID, EFS_AZ),
)
def efs_storage_class(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.obj.get("provisioner") != EFS:
        return
    parameters = mapping(doc.obj.get("parameters"))
    if not parameters:
        return  # a class for statically provisioned volumes only
    if any(_templated(v) and "${." not in str(v) for v in parameters.values()):
        return
    for key, why in _efs_problems(parameters):
        yield Violation(
            f"{key}: {why}: CreateVolume fails and every claim of the class stays Pending",
            ("parameters", key) if key in parameters else ("parameters",),
        )


EFS_ACCESS_MODES = {"ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"}


@resource_rule(
    id="efs-access-mode",
    severity=ERROR,
    title="Claims of an EFS class use the access modes the driver offers",
    why="The EFS CSI driver supports only single-node writer and multi-node multi-writer: a "
    "ReadOnlyMany claim of an EFS class fails CreateVolume with 'Volume capabilities not "
    "supported' and stays Pending.",
    fix="Claim ReadWriteMany and mount the volume readOnly in the pods that only read it.",
    kinds=("PersistentVolumeClaim",),
    source=(EFS_MODES, EFS_TAG + "pkg/driver/controller.go#L147-L154"),
)
def efs_access_mode(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    name = spec.get("storageClassName")
    if not isinstance(name, str) or not name or spec.get("volumeName"):
        return
    storage_class = ctx.find("StorageClass", name)
    if storage_class is None or storage_class.obj.get("provisioner") != EFS:
        return
    for mode in sorted({str(m) for m in spec.get("accessModes") or []} - EFS_ACCESS_MODES):
        if _templated(mode):
            continue
        yield Violation(
            f"{mode}: the EFS CSI driver offers only ReadWriteOnce and ReadWriteMany, so "
            "CreateVolume fails and the claim stays Pending",
            ("spec", "accessModes"),
        )
