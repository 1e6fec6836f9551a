"""The live API client against a stand-in API server (a local HTTP server answering the
GET requests with recorded bodies: no Kubernetes API server exists in CI). Checks the
real kubernetes client calls, 404 handling, and that a saved session replays to the
same report."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from urllib.parse import urlsplit

import pytest

from tests.doctor.test_doctor_job import recording as job_recording
from trainops.kube import request_key


@pytest.fixture
def stand_in_api_server(tmp_path):
    responses = json.loads(job_recording(tmp_path).read_text())["responses"]
    # No training-operator object: its look-ups answer 404.
    del responses["/apis/kubeflow.org/v1/namespaces/training/pytorchjobs/llama"]
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            parts = urlsplit(self.path)
            query = dict(p.split("=", 1) for p in parts.query.split("&") if p)
            from urllib.parse import unquote

            key = request_key(parts.path, {k: unquote(v) for k, v in query.items()})
            seen.append((key, self.headers.get("Authorization")))
            body = responses.get(key)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"kind":"Status","code":404,"reason":"NotFound"}')
                return
            text = body if isinstance(body, str) else json.dumps(body)
            self.send_response(200)
            kind = "text/plain" if isinstance(body, str) else "application/json"
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""\
apiVersion: v1
kind: Config
clusters:
- name: stand-in
  cluster: {{server: "http://127.0.0.1:{server.server_port}"}}
users:
- name: reader
  user: {{token: secret-token}}
contexts:
- name: stand-in
  context: {{cluster: stand-in, user: reader}}
current-context: stand-in
""")
    yield kubeconfig, seen
    server.shutdown()


def test_live_client_against_a_stand_in_api_server_and_replay(
    trainops, tmp_path, stand_in_api_server
):
    kubeconfig, seen = stand_in_api_server
    saved = tmp_path / "session.json"
    live = trainops(
        "doctor",
        "job",
        "llama",
        "--context",
        "stand-in",
        "--format",
        "json",
        "--save-recording",
        str(saved),
        env={"KUBECONFIG": str(kubeconfig)},
    )
    assert live.code == 1, live.err  # the recorded job has errors to report
    assert (
        "/api/v1/namespaces/training/pods?labelSelector=training.kubeflow.org%2Fjob-name%3Dllama",
        "Bearer secret-token",
    ) in seen
    replay = trainops("doctor", "job", "llama", "--recording", str(saved), "--format", "json")
    assert json.loads(replay.out) == json.loads(live.out)
    assert json.loads(live.out)["job"]["condition"] is None
    # 404s (the job look-ups) are recorded as absent, not as errors.
    assert (
        json.loads(saved.read_text())["responses"][
            "/apis/kubeflow.org/v1/namespaces/training/mpijobs/llama"
        ]
        is None
    )


def test_an_unreachable_cluster_is_a_one_line_error(trainops, tmp_path):
    # A port this test holds bound but never listens on: connections to it are refused,
    # and no other process on the machine can start listening there meanwhile.
    with socket.socket() as refusing:
        refusing.bind(("127.0.0.1", 0))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(f"""\
apiVersion: v1
kind: Config
clusters: [{{name: gone, cluster: {{server: "http://127.0.0.1:{refusing.getsockname()[1]}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: gone, context: {{cluster: gone, user: u}}}}]
current-context: gone
""")
        run = trainops("doctor", "job", "llama", env={"KUBECONFIG": str(kubeconfig)})
    assert run.code == 2
    assert len(run.err.strip().splitlines()) == 1 and "GET /api/v1/namespaces" in run.err
