"""The text of a generated overlay file: the header that says where it comes from, then
the YAML documents."""

from __future__ import annotations

from typing import Any

from trainops.yamlio import dump

HEADER = (
    "# Generated from cluster.yaml by trainops. Change the profile instead\n"
    "# (`trainops set {name} KEY=VALUE`): regeneration overwrites this file.\n"
)


def generated_file(cluster: str, *documents: Any, comment: str = "") -> str:
    text = HEADER.format(name=cluster) + comment
    return text + "---\n".join(dump(doc) for doc in documents)
