#!/usr/bin/env bash
# CPU smoke test of the KubeRay path, on any cluster (kind, minikube, a cloud):
# applies k8s/overlays/cpu-smoke, waits until the RayService is Ready, forwards
# the Serve Service to 127.0.0.1, calls /readyz and asks one question about a
# test clip. The model has random weights: the answer's text is meaningless;
# the test is that the operator, the images, the API key and the whole graph
# (ingress -> decode tier -> model) work.
#
# Needs: kubectl pointed at the cluster, the KubeRay operator installed, the CPU
# image pushed where the cluster can pull it (set in the overlay's images:), and
# k8s/base/api-key.env (see k8s/base/kustomization.yaml).
#   bash k8s/smoke.sh            # from the project root
# Environment: NAMESPACE (default: kubectl's), TIMEOUT (20m), PORT (8000),
# CLIP (tests/data/intel_car-detection.mp4), API_KEY_FILE, KUBECTL, DELETE=1 to
# delete the overlay's objects at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL=${KUBECTL:-kubectl}
OVERLAY=k8s/overlays/cpu-smoke
TIMEOUT=${TIMEOUT:-20m}
PORT=${PORT:-8000}
CLIP=${CLIP:-tests/data/intel_car-detection.mp4}
API_KEY_FILE=${API_KEY_FILE:-k8s/base/api-key.env}
NS=()
[[ -n "${NAMESPACE:-}" ]] && NS=(--namespace "$NAMESPACE")
BASE="http://127.0.0.1:${PORT}"

if [[ ! -f "$API_KEY_FILE" ]]; then
  echo "error: $API_KEY_FILE is missing; create it first:" >&2
  echo "  echo \"COSMOS_SERVE_API_KEY=\$(openssl rand -hex 32)\" > $API_KEY_FILE" >&2
  exit 2
fi
KEY=$(sed -n 's/^COSMOS_SERVE_API_KEY=//p' "$API_KEY_FILE" | head -1)
AUTH=(-H "Authorization: Bearer ${KEY}")

echo "== apply $OVERLAY"
"$KUBECTL" "${NS[@]}" apply -k "$OVERLAY"
echo "== wait for rayservice/cosmos-serve to be Ready (up to $TIMEOUT: image pulls, Ray start, app deploy)"
"$KUBECTL" "${NS[@]}" wait --for=condition=Ready rayservice/cosmos-serve --timeout="$TIMEOUT"

echo "== port-forward svc/cosmos-serve-serve-svc to $BASE"
"$KUBECTL" "${NS[@]}" port-forward svc/cosmos-serve-serve-svc "${PORT}:8000" >/dev/null &
FORWARD=$!
cleanup() {
  kill "$FORWARD" 2>/dev/null || true
  if [[ "${DELETE:-0}" == 1 ]]; then "$KUBECTL" "${NS[@]}" delete -k "$OVERLAY" --wait=false || true; fi
}
trap cleanup EXIT
for _ in $(seq 1 30); do
  curl -s -o /dev/null "$BASE/healthz" && break
  sleep 1
done

echo "== GET /readyz"
curl -sS --fail-with-body --max-time 30 "${AUTH[@]}" "$BASE/readyz"
echo
echo "== POST /v1/video/query ($CLIP; random weights: the answer text is meaningless)"
curl -sS --fail-with-body --max-time 300 "${AUTH[@]}" "$BASE/v1/video/query" \
  -F "video=@${CLIP}" -F "question=What is happening in this clip?"
echo
echo "== smoke test passed"
