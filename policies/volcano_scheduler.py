"""The volcano-scheduler's configuration (the volcano-scheduler.conf key of its ConfigMap).

Facts from volcano v1.15.1: the scheduler reads the file that --scheduler-conf names
(cmd/scheduler/app/options/options.go; the chart mounts its ConfigMap at /volcano.scheduler
and passes /volcano.scheduler/volcano-scheduler.conf) and decodes it with gopkg.in/yaml.v2
into conf.SchedulerConfiguration (pkg/scheduler/conf/scheduler_conf.go): not strictly, so a
key it does not know is dropped without a word, but a value of the wrong YAML type is an
error. UnmarshalSchedulerConf (pkg/scheduler/util.go) then refuses the whole file when drf
with enableHierarchy and proportion share a tier, and when an action of the comma-separated
`actions` string is not registered (pkg/scheduler/actions/factory.go). On an error the
scheduler logs 'Scheduler config ... is invalid' and keeps its built-in default
configuration (pkg/scheduler/scheduler.go loadSchedulerConf), or exits when
--disable-default-scheduler-config is set. A plugin name it has no builder for
(pkg/scheduler/plugins/factory.go) is skipped at every session ('Failed to get plugin',
pkg/scheduler/framework/framework.go OpenSession), and plugin arguments of the wrong type are
skipped with a warning (pkg/scheduler/framework/arguments.go).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import Any

import yaml

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, mapping

from .argocd_apps import chart_sources, helm_values

VOLCANO = "https://github.com/volcano-sh/volcano/blob/v1.15.1/"
UTIL = VOLCANO + "pkg/scheduler/util.go"
SCHEDULER = VOLCANO + "pkg/scheduler/scheduler.go"
CONF = VOLCANO + "pkg/scheduler/conf/scheduler_conf.go"
FRAMEWORK = VOLCANO + "pkg/scheduler/framework/framework.go"
ARGUMENTS = VOLCANO + "pkg/scheduler/framework/arguments.go"
CONF_KEY = "volcano-scheduler.conf"

# pkg/scheduler/actions/factory.go: the actions RegisterAction knows.
ACTIONS = frozenset(
    {
        "reclaim",
        "allocate",
        "backfill",
        "preempt",
        "gangpreempt",
        "gangreclaim",
        "enqueue",
        "shuffle",
    }
)
# pkg/scheduler/plugins/factory.go: the plugins RegisterPluginBuilder knows.
PLUGINS = frozenset(
    {
        "drf",
        "gang",
        "deviceshare",
        "predicates",
        "priority",
        "nodeorder",
        "conformance",
        "binpack",
        "resource-strategy-fit",
        "tdm",
        "overcommit",
        "sla",
        "task-topology",
        "numa-aware",
        "cdp",
        "rescheduling",
        "usage",
        "pdb",
        "nodegroup",
        "network-topology-aware",
        "proportion",
        "capacity",
        "extender",
        "resourcequota",
    }
)
TOP_KEYS = frozenset({"actions", "tiers", "configurations", "metrics"})
# conf.PluginOption: the *bool fields by their yaml names (EnabledClusterOrder is spelt so).
PLUGIN_SWITCHES = frozenset(
    {
        "enableJobOrder",
        "enableHierarchy",
        "enableJobReady",
        "enableJobPipelined",
        "enableTaskOrder",
        "enablePreemptable",
        "enableReclaimable",
        "enablePreemptive",
        "enableQueueOrder",
        "EnabledClusterOrder",
        "enablePredicate",
        "enableBestNode",
        "enableNodeOrder",
        "enableTargetJob",
        "enableReservedNodes",
        "enableJobEnqueued",
        "enabledVictim",
        "enableJobStarving",
        "enabledOverused",
        "enabledAllocatable",
        "enabledHyperNodeOrder",
        "enabledSubJobReady",
        "enabledSubJobPipelined",
        "enabledSubJobOrder",
        "enabledHyperNodeGradient",
    }
)
PLUGIN_KEYS = PLUGIN_SWITCHES | {"name", "arguments"}
# Plugin arguments read with Arguments.GetInt / GetFloat64, which skip a value of another
# type (a quoted number) with a warning and keep the default.
INT_ARGUMENTS = {
    "nodeorder": frozenset(
        {
            "nodeaffinity.weight",
            "podaffinity.weight",
            "leastrequested.weight",
            "mostrequested.weight",
            "balancedresource.weight",
            "tainttoleration.weight",
            "imagelocality.weight",
            "podtopologyspread.weight",
        }
    ),
    "binpack": frozenset({"binpack.weight", "binpack.cpu", "binpack.memory"}),
}
FLOAT_ARGUMENTS = {"overcommit": frozenset({"overcommit-factor"})}
# Plain scalars yaml.v2 (YAML 1.1) resolves as booleans or floats that PyYAML reads as strings.
GO_YAML_BOOLS = {"y": True, "Y": True, "n": False, "N": False}
_GO_YAML_FLOAT = re.compile(r"[-+]?(\d[\d_]*)?\.?\d*[eE][-+]?\d+")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "$(" in value)


def _mounted_configs(ctx: Context) -> dict[tuple[str, str], set[str]]:
    """(namespace, ConfigMap name) -> the keys a volcano-scheduler container reads as its
    --scheduler-conf, from the render's Deployments (built once per render)."""
    found: dict[tuple[str, str], set[str]] = {}
    for deployment in ctx.of_kind("Deployment"):
        spec = mapping(mapping(mapping(deployment.obj.get("spec")).get("template")).get("spec"))
        volumes = {str(v.get("name")): v for v in dicts(spec.get("volumes"))}
        for container in dicts(spec.get("containers")):
            if "vc-scheduler" not in str(container.get("image", "")):
                continue
            words = [
                str(w) for w in (container.get("command") or []) + (container.get("args") or [])
            ]
            path = None
            for index, word in enumerate(words):
                if word.lstrip("-").startswith("scheduler-conf="):
                    path = word.partition("=")[2]
                elif word.lstrip("-") == "scheduler-conf" and index + 1 < len(words):
                    path = words[index + 1]
            if not path or _templated(path):
                continue
            folder, base = posixpath.split(path)
            for mount in dicts(container.get("volumeMounts")):
                volume = mapping(volumes.get(str(mount.get("name"))))
                source = mapping(volume.get("configMap"))
                if not source.get("name"):
                    continue
                where = str(mount.get("mountPath", "")).rstrip("/")
                if where == path and mount.get("subPath"):
                    key = str(mount["subPath"])
                elif where == folder:
                    key = base
                    for item in dicts(source.get("items")):
                        if item.get("path") == base and item.get("key"):
                            key = str(item["key"])
                else:
                    continue
                found.setdefault((deployment.namespace, str(source["name"])), set()).add(key)
    return found


def _chart_configs(doc: Document) -> Iterator[tuple[str, tuple[Any, ...], str]]:
    """The volcano chart's custom.scheduler_config_override in an Argo CD Application's (or
    ApplicationSet template's) Helm values: templates/scheduler.yaml writes it, as text, as
    the ConfigMap's volcano-scheduler.conf."""
    for at, helm in chart_sources(doc, "volcano"):
        # Values an ApplicationSet fills in per cluster say nothing until it has.
        if not isinstance(helm.get("valuesObject"), dict) and _templated(helm.get("values")):
            continue
        key, values = helm_values(helm)
        text = mapping(mapping(values).get("custom")).get("scheduler_config_override")
        if isinstance(text, str) and text.strip() and not _templated(text):
            yield "custom.scheduler_config_override", (*at, key), text


def scheduler_configs(doc: Document, ctx: Context) -> Iterator[tuple[str, tuple[Any, ...], str]]:
    """(where, path, text) of each volcano-scheduler configuration a resource holds: a
    ConfigMap's volcano-scheduler.conf entry and the entry a volcano-scheduler Deployment
    mounts, or the volcano chart's override in an Argo CD Application's Helm values."""
    if doc.kind != "ConfigMap":
        yield from _chart_configs(doc)
        return
    data = mapping(doc.obj.get("data"))
    keys = set(
        ctx.memo("volcano-scheduler-mounts", lambda: _mounted_configs(ctx)).get(
            (doc.namespace, doc.name), ()
        )
    )
    if CONF_KEY in data:
        keys.add(CONF_KEY)
    for key in sorted(keys):
        text = data.get(key)
        if isinstance(text, str) and not _templated(text):
            yield key, ("data", key), text


def _parsed(text: str) -> tuple[Any, str | None]:
    try:
        return yaml.safe_load(text), None
    except yaml.YAMLError as error:
        return None, str(error).splitlines()[0]


def _scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def refused(config: Any) -> Iterator[str]:
    """Why UnmarshalSchedulerConf returns an error for the parsed file."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        yield f"the file is a YAML {type(config).__name__}, not a mapping of actions and tiers"
        return
    actions = config.get("actions")
    if not _scalar(actions):
        yield "actions must be one comma-separated string ('enqueue, allocate'), not a list"
    tiers = config.get("tiers")
    if tiers is not None and not isinstance(tiers, list):
        yield "tiers must be a list of {plugins: [...]}"
        tiers = []
    for number, tier in enumerate(tiers or []):
        if tier is None:
            continue
        if not isinstance(tier, dict):
            yield f"tier {number + 1} must be a mapping with plugins"
            continue
        plugins = tier.get("plugins")
        if plugins is not None and not isinstance(plugins, list):
            yield f"tier {number + 1}: plugins must be a list"
            continue
        hierarchy = proportion = False
        for plugin in plugins or []:
            if plugin is None:
                continue
            if not isinstance(plugin, dict):
                yield f"tier {number + 1}: plugin {plugin!r} must be a mapping with a name"
                continue
            name = plugin.get("name")
            if not _scalar(name):
                yield f"tier {number + 1}: a plugin's name must be a string"
            for key in PLUGIN_SWITCHES & plugin.keys():
                value = plugin[key]
                go_bool = isinstance(value, str) and value in GO_YAML_BOOLS
                if value is not None and not isinstance(value, bool) and not go_bool:
                    yield f"plugin {name}: {key} {value!r} is not a YAML boolean (true or false)"
            arguments = plugin.get("arguments")
            if arguments is not None and not isinstance(arguments, dict):
                yield f"plugin {name}: arguments must be a mapping"
            switch = plugin.get("enableHierarchy")
            hierarchy |= name == "drf" and (
                switch is True or (isinstance(switch, str) and GO_YAML_BOOLS.get(switch) is True)
            )
            proportion |= name == "proportion"
        if hierarchy and proportion:
            yield (
                f"tier {number + 1}: proportion and drf with enableHierarchy conflict "
                "('proportion and drf with hierarchy enabled conflicts')"
            )
    configurations = config.get("configurations")
    if configurations is not None and not isinstance(configurations, list):
        yield "configurations must be a list of {name, arguments}"
    for entry in configurations if isinstance(configurations, list) else []:
        if entry is not None and not isinstance(entry, dict):
            yield f"configuration {entry!r} must be a mapping with name and arguments"
        elif (
            entry
            and entry.get("arguments") is not None
            and not isinstance(entry["arguments"], dict)
        ):
            yield f"configuration {entry.get('name')}: arguments must be a mapping"
    metrics = config.get("metrics")
    if metrics is not None and (
        not isinstance(metrics, dict) or not all(_scalar(v) for v in metrics.values())
    ):
        yield (
            "metrics must be a flat mapping of strings (MetricsConfiguration is "
            'map[string]string: write tls.insecureSkipVerify: "true", not a nested tls map)'
        )
    if _scalar(actions):
        text = "" if actions is None else str(actions)
        if _templated(text):
            return
        for name in text.split(","):
            if name.strip() not in ACTIONS:
                shown = name.strip() or "(empty)"
                yield (
                    f"no action {shown!r} in actions {text!r} ('failed to find Action'; Volcano "
                    f"has {', '.join(sorted(ACTIONS))})"
                )
                break


@resource_rule(
    id="volcano-scheduler-conf",
    severity=ERROR,
    source=(
        UTIL + "#L53-L93",
        SCHEDULER + "#L190-L197",
        VOLCANO + "pkg/scheduler/actions/factory.go#L35-L44",
        VOLCANO + "installer/helm/chart/volcano/templates/scheduler.yaml#L17-L23",
    ),
    title="The volcano-scheduler's configuration is one the scheduler accepts",
    why="The volcano-scheduler decodes volcano-scheduler.conf with yaml.v2 and refuses the "
    "whole file when it is not YAML, when a value has the wrong type (actions written as a "
    'list, enableHierarchy: "true" quoted), when drf with enableHierarchy and proportion '
    "share a tier, and when `actions` names an action it does not register or is empty "
    "(a trailing comma too). It logs 'Scheduler config ... is invalid' and schedules with "
    "its built-in default (enqueue, allocate, backfill; priority, gang, conformance, "
    "overcommit, drf, predicates, proportion, nodeorder), so none of the file's actions, "
    "plugins or arguments take effect; with --disable-default-scheduler-config it exits.",
    fix="Write actions as one comma-separated string of Volcano's actions (allocate, "
    "backfill, enqueue, preempt, reclaim, gangpreempt, gangreclaim, shuffle), booleans "
    "unquoted, and keep drf's enableHierarchy out of a tier that has proportion (use "
    "capacity with hierarchy instead).",
    kinds=("ConfigMap", "Application", "ApplicationSet"),
)
def volcano_scheduler_conf(doc: Document, ctx: Context) -> Iterator[Violation]:
    for where, at, text in scheduler_configs(doc, ctx):
        config, error = _parsed(text)
        problems = [f"not YAML: {error}"] if error else list(refused(config))
        for problem in problems:
            yield Violation(
                f"{where}: {problem}; the volcano-scheduler rejects the file and keeps its "
                "default configuration",
                at,
            )


def ignored(config: dict[str, Any]) -> Iterator[str]:
    """What the scheduler drops without refusing the file."""
    for key in sorted(set(config) - TOP_KEYS, key=str):
        yield f"unknown key {key!r} (the scheduler reads {', '.join(sorted(TOP_KEYS))}) is ignored"
    for tier in config.get("tiers") or []:
        for plugin in mapping(tier).get("plugins") or []:
            if not isinstance(plugin, dict):
                continue
            name = str(plugin.get("name"))
            if name not in PLUGINS and not _templated(name):
                yield (
                    f"no plugin {name!r}: the scheduler skips it at every session ('Failed to "
                    "get plugin'), unless it is a custom plugin loaded from --plugins-dir"
                )
            for key in sorted(set(plugin) - PLUGIN_KEYS, key=str):
                yield (
                    f"plugin {name}: unknown option {key!r} is ignored (the switches are spelt "
                    "enableJobOrder ... but enabledVictim, enabledOverused, enabledAllocatable)"
                )
            arguments = mapping(plugin.get("arguments"))
            for argument in sorted(INT_ARGUMENTS.get(name, ()) & arguments.keys()):
                value = arguments[argument]
                if not isinstance(value, int) or isinstance(value, bool):
                    yield (
                        f"plugin {name}: {argument} {value!r} is not an integer; the plugin "
                        "ignores it ('Could not parse argument') and keeps its default"
                    )
            for argument in sorted(FLOAT_ARGUMENTS.get(name, ()) & arguments.keys()):
                value = arguments[argument]
                if isinstance(value, str) and _GO_YAML_FLOAT.fullmatch(value):
                    continue  # 1e3: a float to yaml.v2, a string to PyYAML (unless quoted)
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    yield (
                        f"plugin {name}: {argument} {value!r} is not a number; the plugin "
                        "ignores it ('Could not parse argument') and keeps its default 1.2"
                    )
                elif name == "overcommit" and value < 1:
                    yield (
                        f"plugin overcommit: {argument} {value} is below 1; the plugin uses "
                        "its default 1.2 instead"
                    )
    for entry in config.get("configurations") or []:
        name = mapping(entry).get("name")
        if name is not None and str(name) not in ACTIONS:
            yield (
                f"configuration {name!r} names no action (configurations are read by action "
                "name): its arguments are never read"
            )


@resource_rule(
    id="volcano-scheduler-conf-ignored",
    severity=WARNING,
    source=(
        CONF + "#L27-L107",
        FRAMEWORK + "#L42-L53",
        ARGUMENTS + "#L37-L79",
        VOLCANO + "pkg/scheduler/plugins/overcommit/overcommit.go#L78-L83",
    ),
    title="The volcano-scheduler's configuration holds nothing the scheduler ignores",
    why="The scheduler accepts the file but drops, without failing, what it does not know: "
    "a top-level key other than actions, tiers, configurations and metrics, a plugin option "
    "it does not define (enableOverused for enabledOverused), a plugin it has no builder for "
    "(skipped at every session with 'Failed to get plugin', so a misspelt gang or "
    "proportion turns gang scheduling or queue shares off), a configuration whose name is "
    "no action, an integer or number argument written as a string, and an "
    "overcommit-factor below 1.",
    fix="Spell keys, plugin names and options as pkg/scheduler/conf and the plugins define "
    "them, and write numeric arguments unquoted.",
    kinds=("ConfigMap", "Application", "ApplicationSet"),
)
def volcano_scheduler_conf_ignored(doc: Document, ctx: Context) -> Iterator[Violation]:
    for where, at, text in scheduler_configs(doc, ctx):
        config, error = _parsed(text)
        if error or not isinstance(config, dict) or next(refused(config), None):
            continue
        for problem in ignored(config):
            yield Violation(f"{where}: {problem}", at)
