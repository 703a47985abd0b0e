#!/bin/bash
# Issue 26 item 4 — runs ON THE GPU MACHINE from the project tree, after staging and
# `bash benchmarks/gpu_machine.sh prep 132` (carry .gpu-clips and checkpoints/cosmos-reason1-7b-dummy).
# Cameras per H200, fleet against fleet, measured by the same load tester (python -m loadtest): real-time
# 10-s cameras at 4 fps looping the real fixed-camera clip, 256 output tokens, ignore_eos, 1 or 3 questions
# per window (all asked of every window). A level keeps up when p95 freshness <= 3 s, freshness does not
# grow and there are no errors. One phase per device call (each <= 600 s); the server stays up between calls.
# A call that writes more than 8 files under $OUT ends with `bash benchmarks/gpu_machine.sh pack-out`
# (a device call returns at most 8 files and drops the rest).
#   bash benchmarks/fleet_gpu.sh plain-start              # plain `vllm serve`, the baseline's flags (background)
#   bash benchmarks/fleet_gpu.sh plain Q LEVELS           # loadtest --api openai: each window uploaded as a
#                                                         # video_url data URL to /v1/chat/completions
#   bash benchmarks/fleet_gpu.sh graph-start [CONFIG] [key=value ...]   # serve run configs/h200.yaml
#                                                         # (or CONFIG, e.g. configs/h200-fp8.yaml)
#   bash benchmarks/fleet_gpu.sh graph Q LEVELS           # loadtest --streams: the service reads the cameras
#   bash benchmarks/fleet_gpu.sh crosscheck RATE [N]      # vLLM's own `vllm bench serve` against whichever server
#                                                         # runs: N (96) distinct 10-s windows of the clip as files,
#                                                         # RATE requests/s (cameras / 10), nearly even arrivals
#   bash benchmarks/fleet_gpu.sh burst NAME [STEPS]       # the issue's "windows/s at saturation" on the running graph:
#                                                         # BURST (64) distinct windows of /tmp/xwin (prep N) at once,
#                                                         # the questionsN steps of benchmarks.lifecycle
#                                                         # (default questions1,questions3,questions1,questions3);
#                                                         # sustainN steps: BURST windows kept in flight for
#                                                         # SUSTAIN_S (60) s, the rate read after SUSTAIN_WARMUP_S (20) s (the
#                                                         # sustained windows/s, without a burst's ramp and drain;
#                                                         # SUSTAIN_STAGGER_S (0): the first sends spread over it)
#                                                         # STACKS_AT_S=60,62: the model replica's thread stacks then
#                                                         # (graph-start with COSMOS_SERVE_STACKS_ON_SIGUSR1=1)
#   bash benchmarks/fleet_gpu.sh stop                     # whichever server runs; GPU memory printed
# Q is 1 or 3; LEVELS e.g. 24,30,36 (ascending: stops at the first level that does not keep up) or 20,16,12
# (descending: stops at the first level that keeps up; benchmarks/levels.sh); DURATION_S (80) the measured
# seconds per level; FIRST (0) the first copy index (a later sweep on the same server takes copies no earlier
# sweep used); LEVEL_PAUSE_S (3) the pause between levels.
# Every camera loops its own copy of the clip (python -m loadtest.distinct), new copies for each level: with one
# shared clip, window k was the same for every camera, and vLLM served the repeats from its prefix cache by
# content whatever media UUID the request carried, so the camera counts measured the cache, not the GPU
# (results/gpu/quiet-scenes/README.md, "Correction"). PREFIX_CACHING (1) at the *-start phases: 0 turns vLLM's
# prefix cache off on both sides (questions 2 and 3 of a window then pay their full prefill).
# The copies (~12 CPU-s each for the 139-s clip, in parallel) are written into .gpu-clips/distinct (kept).
# Results: $OUT/fleet_{plain,graph}_q{Q}_{N}.json per level N (the load tester's results) and .tgz (its folder and log).
# A server's derived config (graph-start) and log (stop): fleet_graph_config.yaml, fleet_{graph_serve,plain_server}.log.gz;
# its log so far after each sweep (plain, graph): fleet_{graph_serve,plain_server}_so_far.log.gz; after a burst,
# NAME/serve_so_far.log.gz; after a cross-check, fleet_crosscheck_SIDE_rRATE_server_so_far.log.gz;
# a second server in the same device call gets .2. before the extension (benchmarks/out_names.sh).
set -uo pipefail
export PYTHONPATH=/root/site:$PWD PATH=/root/site/bin:$PATH VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/levels.sh"
source "$(dirname "${BASH_SOURCE[0]}")/out_names.sh"
# Where graph-start keeps the name of COSMOS_SERVE_ENGINE_TIMINGS's file for burst (a later call).
TIMINGS_NAME=${ENGINE_TIMINGS_NAME_FILE:-/tmp/engine_timings.path}
# Left by graph-start when the model replica prints its threads' stacks on SIGUSR1 (COSMOS_SERVE_STACKS_ON_SIGUSR1).
STACKS_MARK=${STACKS_MARK_FILE:-/tmp/stacks_on_sigusr1}
# The running servers' logs (gpu_machine.sh serve writes the graph's, plain-start the plain one's; the
# *_FILE variables are for tests).
SERVE_LOG=${SERVE_LOG_FILE:-/tmp/serve.log}; PLAIN_LOG=${PLAIN_LOG_FILE:-/tmp/plain_server.log}
CK=$PWD/checkpoints/cosmos-reason1-7b-dummy
CLIP=intel_one-by-one-person-detection.mp4
# The first questions of benchmarks.workload.QUESTIONS (the same set as the 1-vs-3 burst).
mapfile -t QS < <(python3 -c "from benchmarks.workload import QUESTIONS; print('\n'.join(QUESTIONS))")
# The sampling every side uses: the model card's recipe (temperature 0.6, top_p 0.95, repetition_penalty 1.05),
# which the graph applies by default (model.sampling). Plain `vllm serve` gets it in each request: without it,
# plain sampled with vLLM's defaults (temperature 1, no top-p, no penalty: no vocabulary sort per step), a lighter
# decode than the graph's (2026-12-03: at the same 1.6 requests/s and TTFT, plain's last token came 0.39 s sooner).
read -r TEMP TOP_P REP < <(python3 -c "from serve_app.model_facts import COSMOS_TEMPERATURE as t, COSMOS_TOP_P as p, \
COSMOS_REPETITION_PENALTY as r; print(t, p, r)")
questions() { local i; for i in $(seq 0 $(( $1 - 1 ))); do printf -- '--question\n%s\n' "${QS[$i]}"; done; }
# The device tool brings back at most 8 files from $OUT (2026-12-02: the level folders' answers.csv were left
# out): each level leaves $name.json (the results) and $name.tgz (its folder, with answers.csv or requests.csv,
# and the log).
pack() { tar czf "$OUT/$1.tgz" -C "$OUT" "$1" "$1.log" 2>/dev/null && rm -rf "${OUT:?}/$1" "$OUT/$1.log"; }
phase=${1:?plain-start|plain|graph-start|graph|crosscheck|burst|stop}; shift
case "$phase" in
  plain-start)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
    setsid nohup python3 -m vllm.entrypoints.cli.main serve "$CK" --served-model-name cosmos-reason1-7b-dummy \
      --port 8000 --host 127.0.0.1 --load-format dummy --dtype bfloat16 \
      --media-io-kwargs '{"video":{"fps":4}}' --allowed-local-media-path "$PWD/.gpu-clips" \
      --compilation-config '{"compile_mm_encoder":true,"cudagraph_mm_encoder":true}' \
      $([ "${PREFIX_CACHING:-1}" = 1 ] || echo --no-enable-prefix-caching) \
      > "$PLAIN_LOG" 2>&1 < /dev/null &
    echo $! > /tmp/plain.pid; t0=$(date +%s)  # setsid: its own process group (pgid = pid), engine core included
    for _ in $(seq 1 400); do  # stop waiting once the server is gone (2026-12-02: a failed start waited 400 s)
      curl -sf http://127.0.0.1:8000/v1/models >/dev/null && break; kill -0 "$(cat /tmp/plain.pid)" 2>/dev/null || break
      sleep 1
    done
    curl -sf http://127.0.0.1:8000/v1/models >/dev/null || { tail -c 3000 "$PLAIN_LOG"; exit 5; }
    echo "plain ready after $(( $(date +%s) - t0 )) s" ;;
  plain|graph)
    # Level by level, each camera with its own copy of the clip (python -m loadtest.distinct: the camera's index
    # stamped in a corner), a new set of copies per level, so that no window repeats across cameras or levels;
    # stops at the first level that does not keep up (descending LEVELS: at the first that keeps up). Per level:
    # $OUT/fleet_{phase}_q{Q}_{N}.json (+ .log).
    q=${1:?Q (1 or 3)}; levels=${2:?LEVELS}; mapfile -t qargs < <(questions "$q"); first=${FIRST:-0}
    # Copies still being made in the background share the cores with the level: wait for them first
    # (2026-12-03: plain 3 x 12 run alongside them read p95 10.18 s, freshness falling; rerun alone, 3.29 s).
    while pgrep -f '^python3 -m loadtest.distinct' >/dev/null; do sleep 2; done
    down=0; levels_descending "$levels" && down=1
    for n in ${levels//,/ }; do
      mapfile -t copies < <(python3 -m loadtest.distinct ".gpu-clips/$CLIP" --cameras "$n" --first "$first" \
        --out-dir .gpu-clips/distinct)
      first=$(( first + n )); name="fleet_${phase}_q${q}_$n"
      common=(--target http://127.0.0.1:8000 --window-s 10 --fps 4 --max-tokens 256 --ignore-eos
              --duration-s "${DURATION_S:-80}" --warmup-s 5 --slo-s 3 --sweep "$n" --out "$OUT/$name" "${qargs[@]}")
      if [ "$phase" = plain ]; then
        src=(); for c in "${copies[@]}"; do src+=(--source "$c"); done
        # Each request asks vLLM to run its video processor on the GPU, as the baseline's client did
        # (../shared/gpu/baseline/ext_client.sh); as a server flag it failed vLLM 0.24's start (2026-12-02:
        # the encoder's dummy batch came out on CUDA and pin_memory() refused it).
        python3 -m loadtest --api openai "${src[@]}" --all-questions --no-live --no-plots "${common[@]}" \
          --temperature "$TEMP" \
          --extra-body "{\"mm_processor_kwargs\":{\"device\":\"cuda\"},\"top_p\":$TOP_P,\"repetition_penalty\":$REP}" \
          > "$OUT/$name.log" 2>&1
      else
        src=(); for c in "${copies[@]}"; do src+=(--file "distinct/$(basename "$c")"); done
        python3 -m loadtest --streams "${src[@]}" "${common[@]}" > "$OUT/$name.log" 2>&1
      fi
      rc=$?; echo "== $phase q$q $n cameras rc=$rc"
      cp "$OUT/$name/results.json" "$OUT/$name.json" 2>/dev/null
      grep -E "keeps up|falls behind|p95 freshness" "$OUT/$name.log" | tail -3
      pack "$name"
      level_ends_sweep $down $rc && break
      sleep "${LEVEL_PAUSE_S:-3}"
    done
    log=$SERVE_LOG; so_far=fleet_graph_serve_so_far.log.gz
    [ "$phase" = plain ] && { log=$PLAIN_LOG; so_far=fleet_plain_server_so_far.log.gz; }
    log_so_far "$log" "$(out_path "$so_far")" ;;
  graph-start)
    config=configs/h200.yaml; case "${1:-}" in configs/*) config=$1; shift;; esac
    # With the engine timings, the model replica's event-loop lag too (serve_app/model/loop_lag.py), beside them.
    [ -n "${COSMOS_SERVE_ENGINE_TIMINGS:-}" ] && \
      export COSMOS_SERVE_LOOP_LAG=${COSMOS_SERVE_LOOP_LAG:-${COSMOS_SERVE_ENGINE_TIMINGS%.jsonl}.loop_lag.jsonl}
    bash benchmarks/gpu_machine.sh serve "$config" model.model_id=$CK model.engine_args.load_format=dummy \
      model.allow_ignore_eos=true "sources.allowed_roots=[\"$PWD/.gpu-clips\",\"/tmp/xwin\"]" streams.max_streams=256 \
      streams.max_frame_memory_bytes=34359738368 \
      model.engine_args.enable_prefix_caching=$([ "${PREFIX_CACHING:-1}" = 1 ] && echo true || echo false) "$@" || exit 5
    # burst runs in a later device call, whose shell lacks this one's environment: it reads the timings file's
    # name from here (2026-12-05: the fourteenth lease's timings had to be fetched by hand).
    echo "${COSMOS_SERVE_ENGINE_TIMINGS:-}" > "$TIMINGS_NAME"
    # burst's STACKS_AT_S sends SIGUSR1, which ends a replica that did not register the handler: only with this mark.
    if [ -n "${COSMOS_SERVE_STACKS_ON_SIGUSR1:-}" ]; then touch "$STACKS_MARK"; else rm -f "$STACKS_MARK"; fi
    cp /tmp/derived.yaml "$(out_path fleet_graph_config.yaml)" ;;
  crosscheck)
    # Issue 26's cross-check with a tool no one here wrote. The windows are cut once (benchmarks.workload:
    # distinct start offsets over the clip) into .gpu-clips/xwin, under both servers' allowed media paths.
    # --burstiness 100: gamma-distributed gaps of nearly constant length, as real-time cameras send. The
    # graph's requests carry its config's system prompt (~30 tokens more of 8,129); plain's carry none.
    rate=${1:?RATE (requests/s, e.g. 1.6 for 16 cameras of 10-s windows)}; n=${2:-96}; W=$PWD/.gpu-clips/xwin
    side=graph; [ -f "$PLAIN_LOG" ] && side=plain
    [ -f "$W/cross_$n.json" ] || python3 - "$n" "$W" "$CLIP" <<'PY' || exit 6
import json, sys
from pathlib import Path

import av

from benchmarks.workload import QUESTION, cut_window_files, windows

n, out, clip = int(sys.argv[1]), Path(sys.argv[2]), Path(".gpu-clips") / sys.argv[3]
with av.open(str(clip)) as c:
    duration_s = float(c.duration / 1e6)
files = cut_window_files(windows(clip, n, duration_s), out, workers=12)
rows = [{"id": f"w{i}", "video": str(p), "conversations": [{"from": "human", "value": QUESTION},
         {"from": "gpt", "value": "a b c d e f g h"}]} for i, p in enumerate(files)]
(out / f"cross_{n}.json").write_text(json.dumps(rows))
PY
    model=$(curl -s http://127.0.0.1:8000/v1/models | python3 -c 'import json,sys;print(json.load(sys.stdin)["data"][0]["id"])')
    extra=(); [ "$side" = plain ] && extra=(--extra-body '{"mm_processor_kwargs":{"device":"cuda"}}')
    name="fleet_crosscheck_${side}_r$rate"
    python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat --base-url http://127.0.0.1:8000 \
      --endpoint /v1/chat/completions --model "$model" --tokenizer "$CK" --dataset-name sharegpt \
      --dataset-path "$W/cross_$n.json" --num-prompts "$n" --request-rate "$rate" --burstiness 100 \
      --sharegpt-output-len 256 --ignore-eos --percentile-metrics ttft,e2el --metric-percentiles 50,95,99 \
      --temperature "$TEMP" --top-p "$TOP_P" --repetition-penalty "$REP" \
      --disable-tqdm --save-result --result-dir "$OUT" --result-filename "$name.json" "${extra[@]}" \
      > "$OUT/$name.log" 2>&1
    echo "== crosscheck $side $rate/s rc=$?"
    grep -E "Successful|Failed|Request throughput|Median E2EL|P95 E2EL|P95 TTFT" "$OUT/$name.log"
    log=$SERVE_LOG; [ "$side" = plain ] && log=$PLAIN_LOG
    log_so_far "$log" "$OUT/${name}_server_so_far.log.gz" ;;
  burst)
    # Every window of a step is a new clip (the steps of one run take consecutive windows of /tmp/xwin, and
    # prep at least 4 x BURST + 16 windows; a second run on the same server sends the same files again, which
    # vLLM's prefix cache does not serve: each request's clip identity is its cache_salt (2026-12-03, tenth
    # lease: 0 cached tokens for every first question of the second run); a sustainN step takes BURST + ~3/s x
    # SUSTAIN_S: `prep 800 .gpu-clips/intel_one-by-one-person-detection.mp4` for three). With
    # COSMOS_SERVE_ENGINE_TIMINGS set at graph-start, vLLM's per-request timings (prefix-cache hits per
    # question) are copied beside the result (graph-start keeps the file's name in $TIMINGS_NAME), and the model
    # replica's event-loop lag with them.
    name=${1:?NAME}; steps=${2:-questions1,questions3,questions1,questions3}
    # STACKS_AT_S (e.g. 60,62,64): at these seconds into the steps, SIGUSR1 to the model replica, which then writes
    # every thread's Python stack to its stderr (Ray's worker-*.err, copied to NAME/stacks.tgz): where its event
    # loop is while the loop lags. Only when graph-start set COSMOS_SERVE_STACKS_ON_SIGUSR1 (else SIGUSR1 ends it).
    stacker=""
    if [ -n "${STACKS_AT_S:-}" ] && [ ! -f "$STACKS_MARK" ]; then
      echo "STACKS_AT_S ignored: graph-start did not set COSMOS_SERVE_STACKS_ON_SIGUSR1"
    elif [ -n "${STACKS_AT_S:-}" ]; then
      ( t0=$(date +%s)
        for at in ${STACKS_AT_S//,/ }; do
          while [ $(( $(date +%s) - t0 )) -lt "$at" ]; do sleep 0.2; done
          pkill -USR1 -f '^ray::ServeReplica:[^ ]*:VideoModel'
        done ) &
      stacker=$!
    fi
    python3 -m benchmarks.lifecycle --config /tmp/derived.yaml --windows-dir /tmp/xwin --tokenizer "$CK" \
      --steps "$steps" --burst "${BURST:-64}" --sustain-s "${SUSTAIN_S:-60}" \
      --sustain-warmup-s "${SUSTAIN_WARMUP_S:-20}" --sustain-stagger-s "${SUSTAIN_STAGGER_S:-0}" --out "$OUT/$name/lifecycle.json" \
      > "$OUT/$name.log" 2>&1
    echo "== burst $name rc=$?"; grep -E "^==|Error|Traceback" "$OUT/$name.log" | cut -c1-400
    if [ -n "$stacker" ]; then
      kill "$stacker" 2>/dev/null
      mapfile -t errs < <(grep -l "most recent call first" /tmp/ray/session_latest/logs/worker-*.err 2>/dev/null)
      [ ${#errs[@]} -gt 0 ] && mkdir -p "$OUT/$name" && tar czf "$OUT/$name/stacks.tgz" "${errs[@]}" 2>/dev/null
      echo "stacks: ${#errs[@]} worker log(s) with stacks"
    fi
    timings=${COSMOS_SERVE_ENGINE_TIMINGS:-$(cat "$TIMINGS_NAME" 2>/dev/null)}
    if [ -n "$timings" ] && [ -f "$timings" ]; then
      mkdir -p "$OUT/$name"; gzip -c "$timings" > "$OUT/$name/engine_timings.jsonl.gz"
      lag=${timings%.jsonl}.loop_lag.jsonl  # graph-start's COSMOS_SERVE_LOOP_LAG: the replica's loop lag so far
      [ -f "$lag" ] && gzip -c "$lag" > "$OUT/$name/loop_lag.jsonl.gz"
    fi
    log_so_far "$SERVE_LOG" "$OUT/$name/serve_so_far.log.gz" ;;
  stop)
    if [ -f "$PLAIN_LOG" ]; then
      kill -INT -- -"$(cat /tmp/plain.pid)" 2>/dev/null; sleep 8
      gzip -c "$PLAIN_LOG" > "$(out_path fleet_plain_server.log.gz)"; rm -f "$PLAIN_LOG" /tmp/plain.pid
    fi
    if [ -f "$SERVE_LOG" ]; then
      gzip -c "$SERVE_LOG" > "$(out_path fleet_graph_serve.log.gz)"
      RAY_AUTH_MODE=token serve shutdown -y >/dev/null 2>&1; sleep 5; ray stop --force >/dev/null 2>&1
      rm -f "$SERVE_LOG" "$TIMINGS_NAME" "$STACKS_MARK"
    fi
    nvidia-smi --query-gpu=memory.used --format=csv,noheader ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
