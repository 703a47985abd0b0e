"""k8s/smoke.sh drives kubectl and the Serve routes as the README says (against a fake kubectl on loopback).

The real run needs a cluster; here a fake ``kubectl`` records its arguments and,
for ``port-forward``, serves ``/healthz``, ``/readyz`` and ``/v1/video/query`` on
127.0.0.1 (bounded to 60 s), checking the bearer key and the uploaded clip.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from serve_app.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
CLIP = ROOT / "tests" / "data" / "dashcam_0p4s.mp4"

FAKE_KUBECTL = textwrap.dedent("""
    import http.server, json, os, sys, threading
    log = os.environ["FAKE_LOG"]
    with open(log, "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
    if "port-forward" not in sys.argv:
        sys.exit(int(os.environ.get("FAKE_RC_" + sys.argv[1].replace("-", "_"), "0")))
    port = int(sys.argv[-1].split(":")[0])
    key = os.environ["FAKE_KEY"]
    clip = open(os.environ["FAKE_CLIP"], "rb").read()

    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authed(self):
            return self.headers.get("Authorization") == "Bearer " + key

        def do_GET(self):
            if self.path == "/healthz":
                return self.reply(200, {"status": "ok"})
            if self.path == "/readyz":
                status = int(os.environ.get("FAKE_READY", "200"))
                return self.reply(status if self.authed() else 401, {"ready": status == 200})
            self.reply(404, {})

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            ok = self.authed() and clip in body and b"What is happening" in body
            with open(log, "a") as f:
                f.write(json.dumps(["POST", self.path, ok]) + "\\n")
            self.reply(200 if ok else 400, {"answer": "random-weight text"})

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    threading.Timer(60, server.shutdown).start()
    server.serve_forever()
""")


def run_smoke(tmp_path: Path, **env_extra: str) -> tuple[subprocess.CompletedProcess, list]:
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!{sys.executable}\n{FAKE_KUBECTL}")
    kubectl.chmod(0o755)
    key_file = tmp_path / "api-key.env"
    key_file.write_text("# a comment\nCOSMOS_SERVE_API_KEY=s3cret-key\n")
    log = tmp_path / "calls.jsonl"
    env = {
        **os.environ, "KUBECTL": str(kubectl), "API_KEY_FILE": str(key_file), "PORT": str(free_port()),
        "CLIP": str(CLIP), "FAKE_LOG": str(log), "FAKE_KEY": "s3cret-key", "FAKE_CLIP": str(CLIP), **env_extra,
    }  # fmt: skip
    out = subprocess.run(["bash", str(ROOT / "k8s" / "smoke.sh")], env=env, capture_output=True, text=True, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return out, calls


def test_smoke_script_applies_waits_checks_readiness_and_asks_one_question(tmp_path):
    out, calls = run_smoke(tmp_path, NAMESPACE="smoke")
    assert out.returncode == 0, out.stdout + out.stderr
    assert calls[0] == ["--namespace", "smoke", "apply", "-k", "k8s/overlays/cpu-smoke"]
    assert calls[1] == [
        "--namespace",
        "smoke",
        "wait",
        "--for=condition=Ready",
        "rayservice/cosmos-serve",
        "--timeout=20m",
    ]
    assert calls[2][:4] == ["--namespace", "smoke", "port-forward", "svc/cosmos-serve-serve-svc"]
    assert calls[2][4].endswith(":8000")
    assert ["POST", "/v1/video/query", True] in calls  # bearer key, clip and question arrived
    assert '"ready": true' in out.stdout and "random-weight text" in out.stdout
    assert out.stdout.rstrip().endswith("== smoke test passed")


def test_smoke_script_fails_when_the_app_is_not_ready(tmp_path):
    out, calls = run_smoke(tmp_path, FAKE_READY="503")
    assert out.returncode != 0 and "smoke test passed" not in out.stdout
    assert not any(c[0] == "POST" for c in calls)


def test_smoke_script_stops_when_the_rayservice_never_gets_ready(tmp_path):
    out, calls = run_smoke(tmp_path, FAKE_RC_wait="1")
    assert out.returncode == 1 and calls[-1][0] == "wait"
    assert not any("port-forward" in c for c in calls)


def test_smoke_script_needs_the_api_key_file(tmp_path):
    out, calls = run_smoke(tmp_path, API_KEY_FILE=str(tmp_path / "missing.env"))
    assert out.returncode == 2 and "missing.env is missing; create it first" in out.stderr
    assert calls == []
