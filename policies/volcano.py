"""Volcano Jobs: what the job plugins provide and the pods expect from them.

Facts from volcano v1.15.1: the svc plugin writes /etc/volcano/<task>.host and sets
VC_<TASK>_HOSTS / VC_<TASK>_NUM (pkg/controllers/job/plugins/svc/const.go); the env
plugin sets VK_TASK_INDEX and VC_TASK_INDEX (plugins/env/const.go); the admission
webhook adds svc when the tensorflow, mpi, pytorch or ray plugin is on
(pkg/webhooks/admission/jobs/mutate/mutate_job.go).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, mapping

NEEDS_SVC = ("tensorflow", "mpi", "pytorch", "ray")
_HOST_FILE = re.compile(r"/etc/volcano/([A-Za-z0-9][\w.-]*?)\.host")
_HOST_VARIABLE = re.compile(r"\bVC_([A-Z0-9_]+)_(HOSTS|NUM)\b")
_INDEX_VARIABLE = re.compile(r"\b(VK_TASK_INDEX|VC_TASK_INDEX)\b")


def _texts(container: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    for key in ("command", "args"):
        for position, word in enumerate(container.get(key) or []):
            if isinstance(word, str):
                yield (key, position), word
    for position, entry in enumerate(dicts(container.get("env"))):
        if isinstance(entry.get("value"), str):
            yield ("env", position, "value"), entry["value"]


@resource_rule(
    id="volcano-plugin-files",
    severity=ERROR,
    source=(
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/controllers/job/plugins/svc/svc.go#L200",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/controllers/job/plugins/env/const.go#L27",
    ),
    title="A Volcano Job's pods use only the hosts files and variables its plugins provide",
    why="/etc/volcano/<task>.host and VC_<TASK>_HOSTS exist only with the svc plugin (which "
    "the tensorflow, mpi, pytorch and ray plugins bring along), VC_TASK_INDEX only with the "
    "env plugin, and each only for tasks the job has. Without them mpirun or the launcher "
    "gets no host list and the job fails at start or waits forever.",
    fix="Enable the plugin (spec.plugins: {svc: [], env: []}) and name tasks the job has.",
    kinds=("Job",),
)
def plugin_files(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not doc.api_version.startswith("batch.volcano.sh/"):
        return
    spec = mapping(doc.obj.get("spec"))
    plugins = mapping(spec.get("plugins"))
    svc = "svc" in plugins or any(p in plugins for p in NEEDS_SVC)
    tasks = {str(t.get("name")) for t in dicts(spec.get("tasks"))}
    variables = {t.upper().replace("-", "_") for t in tasks}
    for index, task in enumerate(dicts(spec.get("tasks"))):
        template = mapping(mapping(task.get("template")).get("spec"))
        for position, container in enumerate(dicts(template.get("containers"))):
            base = ("spec", "tasks", index, "template", "spec", "containers", position)
            for where, text in _texts(container):
                at = (*base, *where)
                for name in _HOST_FILE.findall(text):
                    if not svc:
                        yield Violation(f"{text!r} reads /etc/volcano, but no svc plugin", at)
                    elif name not in tasks:
                        yield Violation(f"/etc/volcano/{name}.host: no task {name!r}", at)
                for name, _ in _HOST_VARIABLE.findall(text):
                    if not svc:
                        yield Violation(f"VC_{name}_* needs the svc plugin", at)
                    elif name not in variables:
                        yield Violation(f"VC_{name}_*: no task {name.lower()!r}", at)
                if _INDEX_VARIABLE.search(text) and "env" not in plugins:
                    yield Violation(f"{text!r}: the task index needs the env plugin", at)
