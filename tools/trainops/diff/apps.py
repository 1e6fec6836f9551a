"""What Argo CD syncs from a tree, keyed by the Application directory that syncs it
(the directories come from trainops.appsets: the git generators of the
ApplicationSets in `argocd/` whose Applications take their source path from the
generator; those that install Helm charts for each cluster do not point into the
repository)."""

from __future__ import annotations

from trainops.diff.compare import ResourceKey
from trainops.model import Document

ARGOCD_DIR = "argocd"


def keyed(app: str, documents: list[Document]) -> dict[ResourceKey, dict]:
    resources = {}
    for doc in documents:
        key = ResourceKey(app, doc.kind, doc.namespace or "", doc.name)
        resources[key] = doc.obj
    return resources
