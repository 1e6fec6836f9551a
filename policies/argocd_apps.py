"""Argo CD Applications, ApplicationSets and AppProjects as Argo CD v3.5.1 validates them.

From the code: an Application's destination names a cluster by server or by name, never
both (`GetDestinationServer`); its project must exist, and must admit its source repository
and its destination (`ValidatePermissions`, `IsSourcePermitted`, `isDestinationMatched`),
or the Application is an InvalidSpecError and never syncs; the ApplicationSet controller
refuses generated Applications whose names repeat or whose project does not exist
(`validateGeneratedApplications`), a matrix generator of other than two children and a merge
generator of fewer than two or without mergeKeys; a project's sync window whose schedule
or duration does not parse stops every sync of the Applications it matches (`CanSync`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from typing import Any

import yaml

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, mapping

ARGO = "https://github.com/argoproj/argo-cd/blob/v3.5.1"
APPSET_CONTROLLER = ARGO + "/applicationset/controllers/applicationset_controller.go#L543-L570"
APP_KINDS = ("Application", "ApplicationSet")
_TEMPLATED = re.compile(r"\{\{|\$\{")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and bool(_TEMPLATED.search(value))


def _app_spec(doc: Document) -> tuple[dict[str, Any], tuple[Any, ...]]:
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "ApplicationSet":
        return mapping(mapping(spec.get("template")).get("spec")), ("spec", "template", "spec")
    return spec, ("spec",)


def chart_sources(doc: Document, chart: str) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(path of its `helm`, the `helm` mapping) of each source of an Application (or an
    ApplicationSet's template) that installs `chart`."""
    spec, base = _app_spec(doc)
    sources = [(("source",), mapping(spec.get("source")))]
    sources += [(("sources", i), s) for i, s in enumerate(dicts(spec.get("sources")))]
    for at, source in sources:
        if source.get("chart") == chart:
            yield (*base, *at, "helm"), mapping(source.get("helm"))


def helm_values(helm: dict[str, Any]) -> tuple[str, Any]:
    """The key a source's Helm values are read from and the values: `valuesObject` when it
    is a mapping, else the `values` text parsed (None where it does not parse)."""
    values = helm.get("valuesObject")
    if isinstance(values, dict) or not isinstance(helm.get("values"), str):
        return "valuesObject", values
    try:
        return "values", yaml.safe_load(helm["values"])
    except yaml.YAMLError:
        return "values", None


def _patched(doc: Document) -> bool:
    """An ApplicationSet whose templatePatch may set what its template leaves out."""
    return doc.kind == "ApplicationSet" and bool(mapping(doc.obj.get("spec")).get("templatePatch"))


def _project(doc: Document, ctx: Context) -> tuple[str, Document | None] | None:
    spec, _ = _app_spec(doc)
    name = spec.get("project")
    if not isinstance(name, str) or not name or _templated(name):
        return None
    return name, ctx.find("AppProject", name)


@resource_rule(
    id="argocd-project-exists",
    severity=ERROR,
    title="Applications name an AppProject the render declares",
    why="An Application whose project does not exist is an InvalidSpecError and is never "
    "synced; the ApplicationSet controller refuses to create or update any Application it "
    "generates for a project that does not exist. A misspelt project name in a render that "
    "declares its AppProjects leaves every Application of it unsynced.",
    fix="Name one of the AppProjects the render declares (or add the AppProject).",
    kinds=APP_KINDS,
    render_needs=("AppProject",),
    source=(APPSET_CONTROLLER, ARGO + "/controller/appcontroller.go#L2739-L2751"),
)
def project_exists(doc: Document, ctx: Context) -> Iterator[Violation]:
    found = _project(doc, ctx)
    known = ctx.known_names("AppProject")
    if found is None or found[0] == "default" or found[1] is not None or not known.count:
        return
    _, base = _app_spec(doc)
    yield Violation(
        f"project {found[0]!r} is not an AppProject of this render ({known}): the "
        "Application is invalid and never syncs",
        (*base, "project"),
    )


@resource_rule(
    id="argocd-destination",
    severity=ERROR,
    title="An Application's destination names its cluster by server or by name",
    why="Argo CD resolves the destination cluster from exactly one of destination.server and "
    "destination.name: with both it fails with \"application destination can't have both "
    'name and server defined", with neither "Destination server missing from app spec"; '
    "the Application (or every Application an ApplicationSet generates) is invalid and "
    "never syncs.",
    fix="Keep one of them: destination.name for a cluster registered by name, or "
    "destination.server (https://kubernetes.default.svc for the local cluster).",
    kinds=APP_KINDS,
    source=ARGO + "/util/argo/argo.go#L1089-L1111",
)
def destination(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _app_spec(doc)
    if "destination" not in spec and (_patched(doc) or not spec):
        return
    target = mapping(spec.get("destination"))
    server, name = target.get("server"), target.get("name")
    if server and name:
        yield Violation(
            f"destination sets both server {server!r} and name {name!r}: Argo CD refuses it",
            (*base, "destination"),
        )
    elif not server and not name and not _patched(doc):
        yield Violation(
            "destination sets neither server nor name: Argo CD has no cluster to sync to",
            (*base, "destination"),
        )


@resource_rule(
    id="argocd-app-sources",
    severity=WARNING,
    title="An Application uses source or sources, not both",
    why="When spec.sources has entries Argo CD syncs those and ignores spec.source "
    "(HasMultipleSources): the single source, often the one edited, is silently not synced.",
    fix="Move the source into spec.sources, or drop spec.sources.",
    kinds=APP_KINDS,
    source=ARGO + "/pkg/apis/application/v1alpha1/types.go#L294-L296",
)
def app_sources(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _app_spec(doc)
    sources = spec.get("sources")
    if spec.get("source") and isinstance(sources, list) and sources:
        yield Violation(
            f"both source and {len(sources)} sources: Argo CD ignores spec.source",
            (*base, "source"),
        )


def _glob(pattern: str) -> re.Pattern[str]:
    """A gobwas glob, read liberally (`*` may cross `/`): a value it does not match, the
    real glob does not match either."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        elif c == "{":
            end = pattern.find("}", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                alternatives = pattern[i + 1 : end].split(",")
                out.append("(" + "|".join(re.escape(a) for a in alternatives) + ")")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("^" + "".join(out) + "$")
    except re.error:
        return re.compile(".*")


def _matches(pattern: Any, value: str) -> bool:
    return pattern == "*" or bool(_glob(str(pattern)).match(value))


_SSH_URL = re.compile(r"^(ssh://)?([^/:]*?)@[^@]+$")  # util/git's sshURLRegex


def _normalize_repo(url: str) -> str:
    """git.NormalizeGitURL: lower case; git@host:path becomes git@host/path; no .git suffix.
    An https and an ssh address of one repository stay different, as they do for Argo CD."""
    url = url.strip().lower()
    if _SSH_URL.match(url) and not url.startswith("ssh://"):
        url = url.replace(":", "/", 1)
    return url.removeprefix("ssh://").removesuffix(".git")


def _sources(spec: dict[str, Any], base: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    sources = spec.get("sources")
    if isinstance(sources, list) and sources:
        found = [((*base, "sources", i), s.get("repoURL")) for i, s in enumerate(dicts(sources))]
    else:
        found = [((*base, "source"), mapping(spec.get("source")).get("repoURL"))]
    return [(path, url) for path, url in found if isinstance(url, str) and url]


@resource_rule(
    id="appproject-source-permitted",
    severity=ERROR,
    title="An Application's repositories are among its project's sourceRepos",
    why="Argo CD checks each source's repoURL against the project's sourceRepos globs; one it "
    'does not match makes the Application an InvalidSpecError ("application repo ... is '
    'not permitted in project") and nothing of it syncs.',
    fix="Add the repository to the AppProject's spec.sourceRepos, or point the source at a "
    "repository the project allows.",
    kinds=APP_KINDS,
    render_needs=("AppProject",),
    source=(
        ARGO + "/util/argo/argo.go#L642-L690",
        ARGO + "/pkg/apis/application/v1alpha1/app_project_types.go#L458-L481",
        ARGO + "/util/git/git.go#L59-L80",
    ),
)
def source_permitted(doc: Document, ctx: Context) -> Iterator[Violation]:
    found = _project(doc, ctx)
    if found is None or found[1] is None:
        return
    name, project = found
    repos = mapping(project.obj.get("spec")).get("sourceRepos")
    repos = repos if isinstance(repos, list) else []  # none listed: none permitted
    if any(str(r).startswith("!") for r in repos):
        return  # deny patterns: left to Argo CD
    spec, base = _app_spec(doc)
    for path, url in _sources(spec, base):
        if _templated(url):
            continue
        normalized = _normalize_repo(url)
        if not any(_matches(_normalize_repo(str(r)), normalized) or r == "*" for r in repos):
            yield Violation(
                f"repository {url} is not among the sourceRepos of AppProject {name}: the "
                "Application is invalid and never syncs",
                (*path, "repoURL"),
            )


@resource_rule(
    id="appproject-destination-permitted",
    severity=ERROR,
    title="An Application's destination is among its project's destinations",
    why="Argo CD matches the Application's cluster (by name or server) and namespace against "
    "the project's destinations; with no match the Application is an InvalidSpecError "
    '("application destination ... do not match any of the allowed destinations") and '
    "nothing of it syncs.",
    fix="Add the cluster and namespace to the AppProject's spec.destinations, or sync the "
    "Application to a destination the project allows.",
    kinds=APP_KINDS,
    render_needs=("AppProject",),
    source=(
        ARGO + "/util/argo/argo.go#L692-L720",
        ARGO + "/pkg/apis/application/v1alpha1/app_project_types.go#L507-L528",
    ),
)
def destination_permitted(doc: Document, ctx: Context) -> Iterator[Violation]:
    found = _project(doc, ctx)
    if found is None or found[1] is None:
        return
    name, project = found
    spec, base = _app_spec(doc)
    target = mapping(spec.get("destination"))
    server, cluster = target.get("server"), target.get("name")
    namespace = str(target.get("namespace") or "")
    if bool(server) == bool(cluster) or _templated(namespace):
        return
    items = dicts(mapping(project.obj.get("spec")).get("destinations"))
    patterns = [str(i.get(k, "")) for i in items for k in ("name", "server", "namespace")]
    if any(p.startswith("!") for p in patterns):
        return  # deny patterns: left to Argo CD
    if _templated(server) or _templated(cluster):
        # The cluster comes from a generator: only the namespace can be checked.
        if not any(_matches(i.get("namespace", ""), namespace) for i in items):
            yield Violation(
                f"namespace {namespace or '(none)'} matches no destination of AppProject "
                f"{name}, on any cluster: the Applications are invalid and never sync",
                (*base, "destination", "namespace"),
            )
        return
    for item in items:
        if not _matches(item.get("namespace", ""), namespace):
            continue
        if cluster:
            # The cluster's server is unknown offline: any server pattern may match it.
            if item.get("server") or _matches(item.get("name", ""), str(cluster)):
                return
        elif item.get("name") or _matches(
            str(item.get("server", "")).rstrip("/"), str(server).rstrip("/")
        ):
            return
    where = f"cluster {cluster}" if cluster else f"server {server}"
    yield Violation(
        f"{where}, namespace {namespace or '(none)'} matches no destination of AppProject "
        f"{name}: the Application is invalid and never syncs",
        (*base, "destination"),
    )


# robfig/cron with Minute | Hour | Dom | Month | Dow: five fields, no descriptors.
_CRON_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    (
        "month",
        1,
        12,
        {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())},
    ),
    ("day of week", 0, 6, {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}),
)
_DURATION = re.compile(r"^[+-]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$")


def _cron_value(text: str, low: int, high: int, names: dict[str, int]) -> int | None:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        return None
    value = int(text)
    return value if low <= value <= high else None


def _cron_problem(schedule: Any) -> str | None:
    if not isinstance(schedule, str) or not schedule.strip():
        return "it is empty"
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        parts = text.split(None, 1)
        text = parts[1] if len(parts) > 1 else ""
    if text.startswith("@"):
        return f"descriptors like {text.split()[0]} are not accepted (five fields are)"
    fields = text.split()
    if len(fields) != 5:
        return f"it has {len(fields)} fields, not 5 (minute hour day-of-month month day-of-week)"
    for (what, low, high, names), field in zip(_CRON_FIELDS, fields, strict=True):
        for part in field.split(","):
            span, slash, step = part.partition("/")
            if slash and (not step.isdigit() or int(step) == 0):
                return f"step {step!r} of the {what} field is not a positive number"
            if span in ("*", "?"):
                continue
            start, dash, end = span.partition("-")
            bounds = [_cron_value(start, low, high, names)]
            if dash:
                bounds.append(_cron_value(end, low, high, names))
            if None in bounds or (dash and bounds[0] > bounds[1]):  # type: ignore[operator]
                return f"{part!r} is not a {what} ({low}-{high})"
    return None


@resource_rule(
    id="appproject-sync-windows",
    severity=ERROR,
    title="An AppProject's sync windows parse and select Applications",
    why="Argo CD parses every matching sync window's schedule (five cron fields, no @daily) "
    "and duration (a Go duration: 1h, 90m, not 1d) at every sync; if one does not parse, "
    "CanSync fails with 'invalid sync windows' and no Application the window matches can "
    "sync, automatically or by hand. A window whose kind is not allow or deny, or that names "
    "no applications, namespaces or clusters, matches or blocks nothing.",
    fix='Write schedule as five cron fields ("0 22 * * *") and duration as a Go duration '
    '("8h"), kind allow or deny, and list the applications, namespaces or clusters it is '
    "for.",
    kinds=("AppProject",),
    source=(
        ARGO + "/pkg/apis/application/v1alpha1/types.go#L2962-L2990",
        ARGO + "/pkg/apis/application/v1alpha1/types.go#L3181-L3190",
        ARGO + "/pkg/apis/application/v1alpha1/types.go#L3433-L3461",
    ),
    when={
        "error": "a schedule or duration that does not parse: matching Applications never sync",
        "warning": "a kind other than allow/deny, or a window that selects nothing: it is ignored",
    },
)
def sync_windows(doc: Document, ctx: Context) -> Iterator[Violation]:
    windows = mapping(doc.obj.get("spec")).get("syncWindows")
    for index, window in enumerate(dicts(windows)):
        path = ("spec", "syncWindows", index)
        problem = _cron_problem(window.get("schedule"))
        if problem:
            yield Violation(
                f"schedule {window.get('schedule')!r} does not parse ({problem}): no "
                "Application this window matches can sync",
                (*path, "schedule"),
            )
        duration = window.get("duration")
        if not isinstance(duration, str) or not (duration == "0" or _DURATION.match(duration)):
            yield Violation(
                f"duration {duration!r} is not a Go duration (like 8h or 90m; there is no d): "
                "no Application this window matches can sync",
                (*path, "duration"),
            )
        if window.get("kind") not in ("allow", "deny"):
            yield Violation(
                f"kind {window.get('kind')!r} is neither allow nor deny: the window is ignored",
                (*path, "kind"),
                severity=WARNING,
            )
        if not any(window.get(k) for k in ("applications", "namespaces", "clusters")):
            yield Violation(
                "the window lists no applications, namespaces or clusters: it matches nothing",
                path,
                severity=WARNING,
            )


def _generators(items: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], dict]]:
    for index, generator in enumerate(dicts(items)):
        at = (*path, index)
        yield at, generator
        for kind in ("matrix", "merge"):
            nested = mapping(generator.get(kind))
            if nested:
                yield from _generators(nested.get("generators"), (*at, kind, "generators"))


@resource_rule(
    id="applicationset-generators",
    severity=ERROR,
    title="Generators the controller can run: matrix and merge with the children they need, "
    "list elements it can read",
    why="The ApplicationSet controller refuses a matrix generator with fewer or more than two "
    "child generators, and a merge generator with fewer than two or without mergeKeys; the "
    "ApplicationSet then generates no Application at all (ErrLessThanTwoGenerators, "
    "ErrMoreThanTwoGenerators, ErrLessThanTwoGeneratorsInMerge, ErrNoMergeKeys). Without "
    "goTemplate, a list generator whose element holds a number, boolean or map (other than "
    "a values map of strings) fails the same way ('error parsing value as string').",
    fix="Give a matrix exactly two generators (nest another matrix for a third), and a merge "
    "at least two generators and the mergeKeys that join them.",
    kinds=("ApplicationSet",),
    source=(
        ARGO + "/applicationset/generators/matrix.go#L18-L46",
        ARGO + "/applicationset/generators/merge.go#L19-L60",
        ARGO + "/applicationset/generators/merge.go#L105-L109",
        ARGO + "/applicationset/generators/list.go#L52-L73",
    ),
)
def generators(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    for path, generator in _generators(spec.get("generators"), ("spec", "generators")):
        if spec.get("goTemplate") is not True:
            yield from _list_strings(mapping(generator.get("list")), path)
        matrix = mapping(generator.get("matrix"))
        if "matrix" in generator:
            count = len(dicts(matrix.get("generators")))
            if count != 2:
                yield Violation(
                    f"matrix generator with {count} generators: the controller accepts exactly "
                    "two and generates nothing",
                    (*path, "matrix"),
                )
        merge = mapping(generator.get("merge"))
        if "merge" in generator:
            count = len(dicts(merge.get("generators")))
            if count < 2:
                yield Violation(
                    f"merge generator with {count} generator(s): it needs at least two",
                    (*path, "merge"),
                )
            keys = merge.get("mergeKeys")
            if not isinstance(keys, list) or not keys:
                yield Violation(
                    "merge generator without mergeKeys: the controller generates nothing",
                    (*path, "merge"),
                )


def _list_strings(generator: dict[str, Any], path: tuple[Any, ...]) -> Iterator[Violation]:
    """Without goTemplate, the list generator reads every element value (and each entry of
    an element's values map) as a string and fails the whole generator on any other."""
    for index, element in enumerate(dicts(generator.get("elements"))):
        at = (*path, "list", "elements", index)
        for key, value in element.items():
            entries = value.items() if key == "values" and isinstance(value, dict) else None
            if key == "values" and entries is None:
                yield Violation("list element values is not a map", (*at, key))
                continue
            for name, item in entries if entries is not None else [(key, value)]:
                if not isinstance(item, str):
                    shown = f"values.{name}" if entries is not None else str(name)
                    yield Violation(
                        f"list element {shown}: {item!r} is not a string, and without "
                        "goTemplate the generator fails ('error parsing value as string'): "
                        "quote it or set goTemplate: true",
                        (*at, key),
                    )


_FAST = re.compile(r"\{\{\s*([\w.\-\[\]]+)\s*\}\}")
_GO = re.compile(r"\{\{-?\s*\.([\w.]+)\s*-?\}\}")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _flat(element: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A list element's parameters as fasttemplate sees them (nested keys dotted)."""
    found: dict[str, str] = {}
    for key, value in element.items():
        if isinstance(value, dict):
            found.update(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, (str, int, float, bool)):
            found[f"{prefix}{key}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return found


def _render_name(template: str, element: dict[str, Any], go: bool) -> str | None:
    """The name a list element gives the template, or None when it is not plain substitution."""
    params = _flat(element)
    pattern = _GO if go else _FAST
    missing = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal missing
        value = params.get(match.group(1))
        if value is None:
            missing = True
            return ""
        return value

    name = pattern.sub(substitute, template)
    if missing or "{{" in name:
        return None
    return name


@resource_rule(
    id="applicationset-generated-names",
    severity=ERROR,
    title="List generators give every Application a distinct, valid name",
    why="The ApplicationSet controller refuses generated Applications whose names repeat "
    '("contains applications with duplicate name"), and the API server refuses an '
    "Application whose name is not a DNS subdomain (upper case, underscores, spaces): the "
    "Applications of those elements are never created or updated.",
    fix="Build the template's metadata.name from a parameter that differs per element and is "
    "lower-case letters, digits, '-' and '.'.",
    kinds=("ApplicationSet",),
    source=(
        APPSET_CONTROLLER,
        "https://github.com/kubernetes/apiextensions-apiserver/blob/v0.35.0/pkg/registry/"
        "customresource/validator.go",
        "https://github.com/kubernetes/apimachinery/blob/v0.35.0/pkg/api/validation/generic.go",
    ),
)
def generated_names(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if spec.get("templatePatch"):
        return
    template = mapping(mapping(spec.get("template")).get("metadata")).get("name")
    if not isinstance(template, str):
        return
    go = spec.get("goTemplate") is True
    seen: dict[str, tuple[Any, ...]] = {}
    for index, generator in enumerate(dicts(spec.get("generators"))):
        listed = mapping(generator.get("list"))
        elements = listed.get("elements")
        if (
            not isinstance(elements, list)
            or listed.get("elementsYaml")
            or generator.get("selector")
        ):
            continue
        for position, element in enumerate(dicts(elements)):
            name = _render_name(template, element, go)
            if name is None:
                continue
            path = ("spec", "generators", index, "list", "elements", position)
            if name in seen:
                yield Violation(
                    f"element gives the Application name {name!r}, as another element does: "
                    "the controller refuses both",
                    path,
                )
            elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
                yield Violation(
                    f"element gives the Application name {name!r}, which is not a DNS "
                    "subdomain: the API server refuses it",
                    path,
                )
            seen.setdefault(name, path)


def _duration_ok(value: Any) -> bool:
    """parseStringToDuration: an integer (seconds) or a Go duration."""
    text = str(value)
    return bool(re.fullmatch(r"[+-]?\d+", text)) or text == "0" or bool(_DURATION.match(text))


@resource_rule(
    id="argocd-retry-backoff",
    severity=WARNING,
    title="Sync retry backoffs are durations Argo CD parses",
    why="Argo CD parses syncPolicy.retry.backoff.duration and maxDuration (seconds, or a Go "
    "duration such as 30s or 5m) only when a sync has failed and is to be retried; one it "
    "cannot parse (1 minute, 1d) ends the operation with 'failed to retry' instead, so the "
    "retries the Application asks for never happen.",
    fix='Write the backoff as a Go duration ("30s", "5m", "3h") or a number of seconds.',
    kinds=APP_KINDS,
    source=(
        ARGO + "/pkg/apis/application/v1alpha1/types.go#L1553-L1585",
        ARGO + "/controller/appcontroller.go#L1619-L1625",
    ),
)
def retry_backoff(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _app_spec(doc)
    backoff = mapping(mapping(mapping(spec.get("syncPolicy")).get("retry")).get("backoff"))
    for key in ("duration", "maxDuration"):
        value = backoff.get(key)
        if value not in (None, "") and not _templated(value) and not _duration_ok(value):
            yield Violation(
                f"retry backoff {key} {value!r} is not a duration Argo CD parses: the "
                "operation fails instead of retrying",
                (*base, "syncPolicy", "retry", "backoff", key),
            )


# text/template's Option (go1.26.3 src/text/template/option.go): anything else panics.
GO_TEMPLATE_OPTIONS = frozenset(
    {"missingkey=default", "missingkey=invalid", "missingkey=zero", "missingkey=error"}
)


@resource_rule(
    id="applicationset-go-template-options",
    severity=ERROR,
    title="goTemplateOptions are options text/template accepts, with goTemplate on",
    why="The ApplicationSet controller passes each goTemplateOptions entry to Go's "
    "text/template Option, which panics on anything but missingkey=default|invalid|zero|error; "
    "the controller recovers and the ApplicationSet generates nothing. Without goTemplate: "
    "true the options are not used at all.",
    fix='Use goTemplateOptions: ["missingkey=error"] (the usual choice) together with '
    "goTemplate: true.",
    kinds=("ApplicationSet",),
    source=(
        ARGO + "/applicationset/utils/utils.go#L400-L415",
        ARGO + "/applicationset/controllers/applicationset_controller.go#L118-L131",
        "https://github.com/golang/go/blob/go1.26.3/src/text/template/option.go",
    ),
    when={
        "error": "an option text/template does not accept: the controller panics",
        "warning": "options without goTemplate: true, which are ignored",
    },
)
def go_template_options(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    options = spec.get("goTemplateOptions")
    if not isinstance(options, list) or not options:
        return
    if spec.get("goTemplate") is not True:
        yield Violation(
            "goTemplateOptions without goTemplate: true: the options are not used",
            ("spec", "goTemplateOptions"),
            severity=WARNING,
        )
        return
    for index, option in enumerate(options):
        if str(option) not in GO_TEMPLATE_OPTIONS:
            yield Violation(
                f"goTemplateOptions {option!r} is not an option text/template accepts "
                "(missingkey=default|invalid|zero|error): the controller panics and "
                "generates nothing",
                ("spec", "goTemplateOptions", index),
            )


@resource_rule(
    id="argocd-helm-values-ignored",
    severity=WARNING,
    title="A Helm source sets values or valuesObject, not both",
    why="When helm.valuesObject is set Argo CD renders the chart with it alone and ignores "
    "helm.values (ValuesYAML): the settings written in values, often the ones edited last, "
    "never reach the chart.",
    fix="Merge the settings into one of them (valuesObject keeps them structured).",
    kinds=APP_KINDS,
    source=ARGO + "/pkg/apis/application/v1alpha1/values.go#L91-L101",
)
def helm_values_ignored(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _app_spec(doc)
    sources = spec.get("sources")
    entries = (
        [((*base, "sources", i), s) for i, s in enumerate(dicts(sources))]
        if isinstance(sources, list) and sources
        else [((*base, "source"), mapping(spec.get("source")))]
    )
    for path, source in entries:
        helm = mapping(source.get("helm"))
        if helm.get("values") and helm.get("valuesObject"):
            yield Violation(
                "helm sets both values and valuesObject: Argo CD uses valuesObject and "
                "ignores values",
                (*path, "helm", "values"),
            )


@resource_rule(
    id="argocd-managed-namespace-metadata",
    severity=WARNING,
    title="managedNamespaceMetadata comes with CreateNamespace=true",
    why="Argo CD applies syncPolicy.managedNamespaceMetadata (the labels and annotations of "
    "the destination namespace, such as a Pod Security level or a Kueue or Istio label) only "
    "when it creates the namespace, that is with the CreateNamespace=true sync option; "
    "without it the labels are never written.",
    fix="Add CreateNamespace=true to spec.syncPolicy.syncOptions, or put the labels on a "
    "Namespace object in Git.",
    kinds=APP_KINDS,
    source=ARGO + "/controller/sync.go#L337-L339",
)
def managed_namespace_metadata(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _app_spec(doc)
    policy = mapping(spec.get("syncPolicy"))
    if not policy.get("managedNamespaceMetadata"):
        return
    options = policy.get("syncOptions")
    if not isinstance(options, list) or "CreateNamespace=true" not in [str(o) for o in options]:
        yield Violation(
            "managedNamespaceMetadata without the CreateNamespace=true sync option: Argo CD "
            "never writes it",
            (*base, "syncPolicy", "managedNamespaceMetadata"),
        )


def _kind_listed(items: Any, group: str, kind: str, name: str | None) -> bool | None:
    """isNamedResourceInList (filepath.Match on kind, group and, when set, name); None when
    a name pattern cannot be decided because the name is generated."""
    for item in dicts(items):
        if not fnmatch.fnmatchcase(kind, str(item.get("kind", ""))):
            continue
        if not fnmatch.fnmatchcase(group, str(item.get("group", ""))):
            continue
        if not item.get("name"):
            return True
        if name is None:
            return None
        if fnmatch.fnmatchcase(name, str(item["name"])):
            return True
    return False


@resource_rule(
    id="appproject-create-namespace",
    severity=ERROR,
    title="A project lets CreateNamespace=true create the namespace",
    why="With CreateNamespace=true Argo CD adds the destination Namespace to the sync when "
    "it does not exist yet (or when managedNamespaceMetadata is set) and checks it like any "
    "object against the project: a Namespace is cluster-scoped, so the project's "
    "clusterResourceWhitelist must allow group '' kind Namespace (an empty whitelist allows "
    "no cluster-scoped kind). Otherwise the sync fails with 'resource :Namespace is not "
    "permitted in project' and nothing of the Application is applied.",
    fix="Add {group: '', kind: Namespace} to the AppProject's clusterResourceWhitelist, or "
    "create the namespace elsewhere and drop CreateNamespace=true.",
    kinds=APP_KINDS,
    render_needs=("AppProject",),
    source=(
        ARGO + "/gitops-engine/pkg/sync/sync_context.go#L1161-L1200",
        ARGO + "/gitops-engine/pkg/sync/sync_context.go#L1085-L1095",
        ARGO + "/controller/sync.go#L647-L659",
        ARGO + "/pkg/apis/application/v1alpha1/app_project_types.go#L399-L419",
    ),
)
def create_namespace(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _app_spec(doc)
    options = mapping(spec.get("syncPolicy")).get("syncOptions")
    if not isinstance(options, list) or "CreateNamespace=true" not in [str(o) for o in options]:
        return
    found = _project(doc, ctx)
    if found is None or found[1] is None:
        return
    name, project = found
    namespace = mapping(spec.get("destination")).get("namespace")
    if not namespace:
        return
    exact = None if _templated(namespace) else str(namespace)
    project_spec = mapping(project.obj.get("spec"))
    allowed = _kind_listed(project_spec.get("clusterResourceWhitelist"), "", "Namespace", exact)
    denied = _kind_listed(project_spec.get("clusterResourceBlacklist"), "", "Namespace", exact)
    if allowed is None or denied is None:
        return
    if not allowed or denied:
        why = "blacklists" if denied else "does not whitelist"
        yield Violation(
            f"CreateNamespace=true, but AppProject {name} {why} the cluster-scoped kind "
            "Namespace: the sync that creates the namespace fails",
            (*base, "syncPolicy", "syncOptions"),
        )
