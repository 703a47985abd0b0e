#!/bin/bash
# Issue 27 item 4 — runs ON THE GPU MACHINE from the project tree, after staging and
# `bash benchmarks/gpu_machine.sh prep N` (carry .gpu-clips and checkpoints/cosmos-reason1-7b-dummy).
# Cameras per H200 that keep up (p95 freshness <= 3 s, python -m loadtest --streams: cameras registered on
# the service, looping a clip, answers read from its events) with quiet-scene skipping off and on, one
# `serve run` of configs/h200.yaml (dummy weights) for every phase; max_skip_s fixed at 60 s beforehand.
#   bash benchmarks/quiet_scenes_gpu.sh serve [key=value ...]     # start the graph (once; later phases reuse it)
#   bash benchmarks/quiet_scenes_gpu.sh real-off|real-on|generated-on|generated-off LEVELS   # e.g. real-off 32,44
#   bash benchmarks/quiet_scenes_gpu.sh worker-on N        # generated clip, skipping on, with the stream worker's
#                                                         # CPU sampled (python -m benchmarks.stream_worker_cpu)
#   bash benchmarks/quiet_scenes_gpu.sh stop
# Clips (.gpu-clips/, made on the CPU machine): intel_one-by-one-person-detection.mp4 (real fixed camera,
# ../shared/data/videos/real, CC BY 4.0 per its licence file) and generated_quiet_room.mp4
# (python -m benchmarks.quiet_scenes --write-clip: static scene, sensor noise, +40 % light ramp over 120 s).
# Every camera loops its own copy of the clip (python -m loadtest.distinct: its index stamped in a corner), new
# copies for every level and phase (the next index is kept in /tmp/distinct.next): on 2026-12-02 all cameras
# looped one clip, vLLM matched the identical windows by content, and the camera counts measured its caches
# (results/gpu/quiet-scenes/README.md, "Correction"). Levels run one at a time; ascending LEVELS stop at the first
# failure, descending ones at the first level that keeps up (benchmarks/levels.sh). LEVEL_PAUSE_S (3): the pause
# between levels; DISTINCT_NEXT_FILE (/tmp/distinct.next): where the next copy index is kept.
# After each sweep, the server's log so far ($OUT/serve_so_far.log.gz); at stop, the whole log ($OUT/serve.log.gz).
set -uo pipefail
export PYTHONPATH=/root/site:$PWD PATH=/root/site/bin:$PATH PYTHONUNBUFFERED=1
# Results go one folder deep ($OUT/NAME/...): the device tool left out deeper folders (2026-12-02).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# The running server's log (gpu_machine.sh serve writes it; SERVE_LOG_FILE is for tests).
SERVE_LOG=${SERVE_LOG_FILE:-/tmp/serve.log}
source "$(dirname "${BASH_SOURCE[0]}")/levels.sh"
source "$(dirname "${BASH_SOURCE[0]}")/out_names.sh"
NEXT=${DISTINCT_NEXT_FILE:-/tmp/distinct.next}
CK=$PWD/checkpoints/cosmos-reason1-7b-dummy
REAL=intel_one-by-one-person-detection.mp4 GEN=generated_quiet_room.mp4
# The device tool brings back at most 8 files from $OUT (2026-12-02: the level folders' answers.csv were left
# out): each level leaves its .json and one .tgz (its folder, log and top).
pack() { local d=$1; shift; tar czf "$OUT/$d.tgz" -C "$OUT" "$d" "$d.log" "$@" 2>/dev/null \
  && (cd "$OUT" && rm -rf "./$d" "./$d.log" "$@"); }
phase=${1:?serve|real-off|real-on|generated-on|stop}; shift
copies() {  # clip n: sets files=(--file distinct/NAME ...), n new copies (indices from $NEXT)
  local first c; first=$(cat "$NEXT" 2>/dev/null || echo 0); echo $(( first + $2 )) > "$NEXT"
  mapfile -t made < <(python3 -m loadtest.distinct ".gpu-clips/$1" --cameras "$2" --first "$first" \
    --out-dir .gpu-clips/distinct)
  files=(); for c in "${made[@]}"; do files+=(--file "distinct/$(basename "$c")"); done
}
lt() {  # name levels clip [loadtest args...]
  local name=$1 levels=$2 clip=$3 n rc down=0; shift 3
  levels_descending "$levels" && down=1
  for n in ${levels//,/ }; do
    copies "$clip" "$n"
    python3 -m loadtest --streams --target http://127.0.0.1:8000 --window-s 10 --fps 4 --max-tokens 256 \
      --ignore-eos --duration-s 80 --warmup-s 5 --slo-s 3 --sweep "$n" --out "$OUT/${name}_$n" "${files[@]}" "$@" \
      > "$OUT/${name}_$n.log" 2>&1
    rc=$?; echo "== $name $n cameras rc=$rc"; grep -E "streams sweep" "$OUT/${name}_$n.log"
    cp "$OUT/${name}_$n/results.json" "$OUT/${name}_$n.json" 2>/dev/null
    top -bn1 | head -15 > "$OUT/${name}_$n.top.txt"
    pack "${name}_$n" "${name}_$n.top.txt"
    level_ends_sweep $down $rc && break
    sleep "${LEVEL_PAUSE_S:-3}"
  done
  log_so_far "$SERVE_LOG" "$(out_path serve_so_far.log.gz)"
}
case "$phase" in
  serve)
    bash benchmarks/gpu_machine.sh serve configs/h200.yaml model.model_id=$CK model.engine_args.load_format=dummy \
      model.allow_ignore_eos=true "sources.allowed_roots=[\"$PWD/.gpu-clips\"]" streams.max_streams=256 \
      streams.max_frame_memory_bytes=34359738368 "$@" || exit 5
    cp /tmp/derived.yaml "$(out_path derived.yaml)" ;;
  real-off) lt real-off "${1:?levels}" $REAL ;;
  real-on) lt real-on "${1:?levels}" $REAL --skip-unchanged 0.01 --max-skip-s 60 ;;
  generated-on) lt generated-on "${1:?levels}" $GEN --skip-unchanged 0.01 --max-skip-s 60 ;;
  generated-off) lt generated-off "${1:?levels}" $GEN ;;
  worker-on)  # one level (N cameras, each its own copy), the stream worker's CPU sampled
    n=${1:?cameras}; copies $GEN "$n"
    python3 -m benchmarks.stream_worker_cpu --cameras "$n" "${files[@]}" --skip-unchanged 0.01 \
      --max-skip-s 60 --max-tokens 256 --ignore-eos --duration-s 80 --out "$OUT/stream_worker_gpu_machine_$n.json" \
      --runs-dir "$OUT/worker-on_$n" \
      > "$OUT/worker-on_$n.log" 2>&1
    echo "== worker-on $n rc=$?"; grep -E "^\{|wrote|Error" "$OUT/worker-on_$n.log"; pack "worker-on_$n" ;;
  stop)
    [ -f "$SERVE_LOG" ] && gzip -c "$SERVE_LOG" > "$(out_path serve.log.gz)"
    RAY_AUTH_MODE=token serve shutdown -y >/dev/null 2>&1; sleep 5; ray stop --force >/dev/null 2>&1
    nvidia-smi --query-gpu=memory.used --format=csv,noheader ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
