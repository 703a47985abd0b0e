#!/bin/bash
# Issue 26 item 4 — runs ON THE GPU MACHINE from the project tree, after staging and
# `bash benchmarks/gpu_machine.sh prep 132` (carry .gpu-clips and checkpoints/cosmos-reason1-7b-dummy).
# Cameras per H200, fleet against fleet, measured by the same load tester (python -m loadtest): real-time
# 10-s cameras at 4 fps looping the real fixed-camera clip, 256 output tokens, ignore_eos, 1 or 3 questions
# per window (all asked of every window). A level keeps up when p95 freshness <= 3 s, freshness does not
# grow and there are no errors. One phase per device call (each <= 600 s); the server stays up between calls.
#   bash benchmarks/fleet_gpu.sh plain-start              # plain `vllm serve`, the baseline's flags (background)
#   bash benchmarks/fleet_gpu.sh plain Q LEVELS           # loadtest --api openai: each window uploaded as a
#                                                         # video_url data URL to /v1/chat/completions
#   bash benchmarks/fleet_gpu.sh graph-start [CONFIG] [key=value ...]   # serve run configs/h200.yaml
#                                                         # (or CONFIG, e.g. configs/h200-fp8.yaml)
#   bash benchmarks/fleet_gpu.sh graph Q LEVELS           # loadtest --streams: the service reads the cameras
#   bash benchmarks/fleet_gpu.sh stop                     # whichever server runs; GPU memory printed
# Q is 1 or 3; LEVELS e.g. 48,64,80; DURATION_S (80) the measured seconds per level.
# PREFIX_CACHING (0) at the *-start phases: 0 turns vLLM's prefix cache off on both sides. Every camera loops
# the same clip, so window k of every camera holds the same frames, and vLLM serves such repeats from its
# prefix cache by content, whatever media UUID the request carries (results/gpu/quiet-scenes/README.md,
# "Correction"): with the cache on, the camera counts measure the cache, not the GPU. 3-question rows need the
# cache (questions 2 and 3 reuse question 1's prefill), hence different content per camera: not built yet, so a
# 3-question row run with PREFIX_CACHING=1 is an upper bound for both sides, not a fleet figure.
# Results: $OUT/fleet_{plain,graph}_q{Q}.json (the sweep) and .log.
# Checked on the CPU machine against `serve run configs/cpu.yaml` (model.allow_ignore_eos, the clip's folder
# allowed; 2026-12-02): `plain 3 1` sent 3 requests per window to its /v1/chat/completions, `graph 3 1`
# registered a camera with 3 questions and got answers to all 3 (DURATION_S=25; the tiny CPU model cannot
# keep up with 256 tokens, so both levels failed, as expected there).
# Plain's flags are ../shared/gpu/baseline/ext_client.sh's (4-fps sampling, the vision tower compiled and
# in CUDA graphs), with the HF processor on the GPU for every request (`--mm-processor-kwargs`: the baseline
# sent the same per request), so both sides give the model 40 frames of 420x756 per window.
set -uo pipefail
export PYTHONPATH=/root/site:$PWD PATH=/root/site/bin:$PATH VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CK=$PWD/checkpoints/cosmos-reason1-7b-dummy
CLIP=intel_one-by-one-person-detection.mp4
# The first questions of benchmarks.lifecycle.QUESTIONS (the same set as the 1-vs-3 burst).
mapfile -t QS < <(python3 -c "from benchmarks.lifecycle import QUESTIONS; print('\n'.join(QUESTIONS))")
questions() { local i; for i in $(seq 0 $(( $1 - 1 ))); do printf -- '--question\n%s\n' "${QS[$i]}"; done; }
phase=${1:?plain-start|plain|graph-start|graph|stop}; shift
case "$phase" in
  plain-start)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
    setsid nohup python3 -m vllm.entrypoints.cli.main serve "$CK" --served-model-name cosmos-reason1-7b-dummy \
      --port 8000 --host 127.0.0.1 --load-format dummy --dtype bfloat16 \
      --media-io-kwargs '{"video":{"fps":4}}' --mm-processor-kwargs '{"device":"cuda"}' \
      --compilation-config '{"compile_mm_encoder":true,"cudagraph_mm_encoder":true}' \
      $([ "${PREFIX_CACHING:-0}" = 1 ] || echo --no-enable-prefix-caching) \
      > /tmp/plain_server.log 2>&1 < /dev/null &
    echo $! > /tmp/plain.pid; t0=$(date +%s)  # setsid: its own process group (pgid = pid), engine core included
    for _ in $(seq 1 400); do curl -sf http://127.0.0.1:8000/v1/models >/dev/null && break; sleep 1; done
    curl -sf http://127.0.0.1:8000/v1/models >/dev/null || { tail -c 3000 /tmp/plain_server.log; exit 5; }
    echo "plain ready after $(( $(date +%s) - t0 )) s" ;;
  plain|graph)
    q=${1:?Q (1 or 3)}; levels=${2:?LEVELS}; mapfile -t qargs < <(questions "$q")
    common=(--target http://127.0.0.1:8000 --window-s 10 --fps 4 --max-tokens 256 --ignore-eos --duration-s "${DURATION_S:-80}"
            --warmup-s 5 --slo-s 3 --sweep "$levels" --sweep-pause-s 3 --out "$OUT/fleet_${phase}_q$q" "${qargs[@]}")
    if [ "$phase" = plain ]; then
      python3 -m loadtest --api openai --source ".gpu-clips/$CLIP" --all-questions --no-live --no-plots \
        "${common[@]}" > "$OUT/fleet_plain_q$q.log" 2>&1
    else
      python3 -m loadtest --streams --file "$CLIP" "${common[@]}" > "$OUT/fleet_graph_q$q.log" 2>&1
    fi
    echo "== $phase q$q rc=$?"
    cp "$OUT/fleet_${phase}_q$q/results.json" "$OUT/fleet_${phase}_q$q.json" 2>/dev/null
    grep -E "sweep|best_cameras|keeps up|falls behind" "$OUT/fleet_${phase}_q$q.log" | tail -8 ;;
  graph-start)
    config=configs/h200.yaml; case "${1:-}" in configs/*) config=$1; shift;; esac
    bash benchmarks/gpu_machine.sh serve "$config" model.model_id=$CK model.engine_args.load_format=dummy \
      model.allow_ignore_eos=true "sources.allowed_roots=[\"$PWD/.gpu-clips\"]" streams.max_streams=256 \
      streams.max_frame_memory_bytes=34359738368 \
      model.engine_args.enable_prefix_caching=$([ "${PREFIX_CACHING:-0}" = 1 ] && echo true || echo false) "$@" || exit 5
    cp /tmp/derived.yaml "$OUT/fleet_graph_config.yaml" ;;
  stop)
    if [ -f /tmp/plain_server.log ]; then
      kill -INT -- -"$(cat /tmp/plain.pid)" 2>/dev/null; sleep 8
      gzip -c /tmp/plain_server.log > "$OUT/fleet_plain_server.log.gz"; rm -f /tmp/plain_server.log /tmp/plain.pid
    fi
    if [ -f /tmp/serve.log ]; then
      gzip -c /tmp/serve.log > "$OUT/fleet_graph_serve.log.gz"
      RAY_AUTH_MODE=token serve shutdown -y >/dev/null 2>&1; sleep 5; ray stop --force >/dev/null 2>&1; rm -f /tmp/serve.log
    fi
    nvidia-smi --query-gpu=memory.used --format=csv,noheader ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
