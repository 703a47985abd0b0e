#!/bin/bash
# Runs ON THE GPU MACHINE (device tool), from the project root, once the
# bundle is staged (bash .gpu-bundle/pK/stage.sh N; see README "GPU").
#   bash serve_app/bench/gpu_machine.sh tests            # tests/gpu -> $OUT/gpu-junit.xml, gpu-tests.log
#   bash serve_app/bench/gpu_machine.sh bench [ARGS]     # python -m serve_app.bench.gpu -> $OUT/gpu_bench.json
#   bash serve_app/bench/gpu_machine.sh serve CONFIG [key=value ...]   # serve run a derived config (background)
set -uo pipefail
export PYTHONPATH=/root/site:$PWD PATH=/root/site/bin:$PATH
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -f /root/site/.done ] || { echo "gpu_machine: bundle not staged on this machine (/root/site/.done missing)"; exit 3; }
cmd=${1:?usage: gpu_machine.sh tests|bench|serve ...}; shift
case "$cmd" in
  tests)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu-info.txt"
    python3 -m pytest tests/gpu -v -p no:cacheprovider --junitxml="$OUT/gpu-junit.xml" "$@" 2>&1 \
      | tee "$OUT/gpu-tests.log" | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|error" ;;
  bench)
    python3 -m serve_app.bench.gpu --out "$OUT/gpu_bench.json" "$@" > "$OUT/bench.log" 2>&1
    rc=$?; grep -E "^\||Error|error|Traceback" "$OUT/bench.log" | tail -40; exit $rc ;;
  serve)
    config=${1:?config}; shift
    python3 -m serve_app.config override "$config" "$@" -o /tmp/derived.yaml || exit 4
    setsid nohup serve run /tmp/derived.yaml > /tmp/serve.log 2>&1 &
    t0=$(date +%s)
    for i in $(seq 1 150); do
      serve status 2>/dev/null | grep -q "status: RUNNING" && break
      grep -q "DEPLOY_FAILED\|Traceback" /tmp/serve.log && { tail -30 /tmp/serve.log; exit 5; }
      sleep 2
    done
    echo "serve: app ready after $(( $(date +%s) - t0 )) s"
    serve status | head -40;;
  *) echo "unknown command $cmd"; exit 2;;
esac
