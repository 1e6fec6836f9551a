"""Read-only access to a Kubernetes API server, live or replayed from a recording.

Every read is a GET of a REST path, so a session can be written to a JSON file
(`--save-recording`) and analysed later or elsewhere (`--recording`): support can
diagnose a cluster it cannot reach, and the tests run the same code on recorded
responses because no API server exists in CI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

from trainops.errors import InputError
from trainops.fsutil import write_atomic

RECORDING_KIND = "trainops-api-recording/v1"


class NotFound(Exception):
    """The API server answered 404 (or the recording holds no such request)."""


class Cluster(Protocol):
    def get(self, path: str, **query: str) -> dict[str, Any]: ...

    def text(self, path: str, **query: str) -> str: ...


def request_key(path: str, query: dict[str, str]) -> str:
    return path + ("?" + urlencode(sorted(query.items())) if query else "")


class RecordedCluster:
    """Answers from a recording: {"kind": ..., "responses": {"GET path?query": body}}."""

    def __init__(self, path: Path):
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError("no such recording", str(path)) from None
        except (OSError, ValueError) as error:
            raise InputError(f"not a JSON recording ({error})", str(path)) from None
        if not isinstance(data, dict) or data.get("kind") != RECORDING_KIND:
            raise InputError(f"not a trainops API recording (kind {RECORDING_KIND})", str(path))
        self.responses: dict[str, Any] = data.get("responses") or {}
        self.context = data.get("context")

    def _answer(self, path: str, query: dict[str, str]) -> Any:
        key = request_key(path, query)
        if key not in self.responses or self.responses[key] is None:
            raise NotFound(key)
        return self.responses[key]

    def get(self, path: str, **query: str) -> dict[str, Any]:
        return self._answer(path, query)

    def text(self, path: str, **query: str) -> str:
        return str(self._answer(path, query))


class LiveCluster:
    """The API server of a kubeconfig context (or the in-cluster service account)."""

    def __init__(self, context: str | None = None):
        try:
            from kubernetes import client, config
        except ImportError:
            raise InputError(
                "reading a live cluster needs the Kubernetes client: "
                "pip install 'trainops[cluster]' (or pass --recording FILE)"
            ) from None

        try:
            config.load_kube_config(context=context)
        except Exception as kube_error:
            try:
                config.load_incluster_config()
            except Exception:
                raise InputError(f"cannot reach a cluster: {kube_error}".splitlines()[0]) from None
        self.api = client.ApiClient()
        self.context = context
        self.recorded: dict[str, Any] = {}

    def _call(self, path: str, query: dict[str, str], as_json: bool) -> Any:
        key = request_key(path, query)
        try:
            method, url, headers, body, post = self.api.param_serialize(
                "GET",
                path,
                query_params=list(query.items()),
                header_params={"Accept": "application/json" if as_json else "*/*"},
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                method, url, header_params=headers, body=body, post_params=post
            )
            data = response.read()
        except Exception as error:  # connection refused, TLS, DNS: one line, no traceback
            raise InputError(f"GET {key}: {error}".splitlines()[0]) from None
        if response.status == 404:
            self.recorded[key] = None
            raise NotFound(key)
        if response.status >= 400:
            raise InputError(f"GET {key}: {response.status} {response.reason or ''}".strip())
        text = data.decode("utf-8", errors="replace")
        try:
            answer = json.loads(text) if as_json else text
        except ValueError:
            raise InputError(f"GET {key}: the API server did not answer with JSON") from None
        self.recorded[key] = answer
        return answer

    def get(self, path: str, **query: str) -> dict[str, Any]:
        return self._call(path, query, as_json=True)

    def text(self, path: str, **query: str) -> str:
        return self._call(path, query, as_json=False)

    def save(self, path: Path) -> None:
        data = {"kind": RECORDING_KIND, "context": self.context, "responses": self.recorded}
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def connect(recording: Path | None, context: str | None) -> Cluster:
    if recording is not None:
        if context:
            raise InputError("--recording replays a saved session; drop --context")
        return RecordedCluster(recording)
    return LiveCluster(context)


def items(cluster: Cluster, path: str, **query: str) -> list[dict[str, Any]]:
    """The items of a list, or none when the resource type does not exist."""
    try:
        return list(cluster.get(path, **query).get("items") or [])
    except NotFound:
        return []
