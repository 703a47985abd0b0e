#!/bin/bash
# Issue 29 item 5 — runs ON THE GPU MACHINE from the project tree, after `bash benchmarks/gpu_machine.sh prep 132`
# (bundle staged in /root/site, 132 window files of 10 s in /tmp/xwin).
# Cosmos-Reason2-8B's architecture (dummy bf16 weights) through (a) plain `vllm serve` and (b) the project's
# graph (configs/h200-reason2.yaml), measured by vLLM's own `vllm bench serve` (backend openai-chat, a
# ShareGPT-format file whose entries carry one 10-s window each), as ../shared/gpu/baseline/ext_client.sh
# measured Cosmos-Reason1. Per side: start, an untimed warm burst of 64, a timed burst of 64 at once, 4 lone clips.
# Plain is told not to resample frames beyond the graph's: the loader samples 4 fps with no frame cap
# (--media-io-kwargs) and the processor's size bounds are the recipe's (inference_sample.py: 256..8192 vision
# tokens of 32² px over t·h·w), so both sides give the model 40 frames of 320×608 per window
# (tests/unit/decode/test_decoder_basic.py checks the graph's size against transformers' rule).
# Usage: bash benchmarks/reason2_vs_plain.sh plain|graph [PHASES]   (results in $OUT: reason2_{side}_{phase}.json/.log)
#   PHASES: a quoted subset of "warm timed single" in that order (default all three), e.g. graph "warm single"
set -uo pipefail
export PYTHONPATH=/root/site:$PWD PATH=/root/site/bin:$PATH VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CK=$PWD/checkpoints/cosmos-reason2-8b-dummy
W=/tmp/xwin
[ -f "$CK/config.json" ] || python3 -m serve_app.checkpoint full-dummy "$CK" --family qwen3_vl >/dev/null
if [ ! -f $W/timed.json ]; then
python3 - <<'PY'
import json
from pathlib import Path
from benchmarks.workload import QUESTION
files = sorted(Path("/tmp/xwin").glob("*.mp4"))
assert len(files) >= 132, f"{len(files)} windows in /tmp/xwin: run gpu_machine.sh prep 132 first"
sets = {"timed": files[:64], "warm": files[64:128], "single": files[128:132]}
for name, part in sets.items():
    data = [{"id": f"{name}{i}", "conversations": [{"from": "human", "value": QUESTION},
             {"from": "gpt", "value": "a b c d e f g h"}], "video": str(p)} for i, p in enumerate(part)]
    Path(f"/tmp/xwin/{name}.json").write_text(json.dumps(data))
PY
fi
ready() {  # url [pid] -> seconds waited until /v1/models answers (or until the server's process pid is gone)
  local t0=$(date +%s.%N)
  for i in $(seq 1 400); do
    curl -sf "$1/v1/models" >/dev/null && break
    [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && break  # a failed start: stop waiting
    sleep 1
  done
  python3 -c "import time;print(round(time.time()-$t0,1))"
}
bench() {  # side url "phases" extra-args...
  local side=$1 url=$2 phases=$3; shift 3
  local model=$(curl -s "$url/v1/models" | python3 -c 'import json,sys;print(json.load(sys.stdin)["data"][0]["id"])')
  for phase in $phases; do
    conc=64; n=64; [ $phase = single ] && conc=1 && n=4
    python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat --base-url "$url" --endpoint /v1/chat/completions \
      --model "$model" --tokenizer "$CK" --dataset-name sharegpt --dataset-path $W/$phase.json \
      --num-prompts $n --max-concurrency $conc --request-rate inf --sharegpt-output-len 256 --ignore-eos \
      --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,95,99 --disable-tqdm \
      --save-result --result-dir "$OUT" --result-filename "reason2_${side}_${phase}.json" "$@" \
      > "$OUT/reason2_${side}_${phase}.log" 2>&1
    echo "== $side $phase rc=$?"; grep -E "Successful|Failed|Request throughput|Median TTFT|P95 TTFT|Total input|Mean E2EL" "$OUT/reason2_${side}_${phase}.log"
  done
}
PHASES=${2:-warm timed single}
case "${1:?plain|graph}" in
plain)
  python3 -m vllm.entrypoints.cli.main serve "$CK" --served-model-name cosmos-reason2-8b-dummy --port 8000 \
    --host 127.0.0.1 --load-format dummy --dtype bfloat16 --max-model-len 16384 --allowed-local-media-path $W \
    --media-io-kwargs '{"video":{"fps":4,"num_frames":-1}}' \
    --mm-processor-kwargs '{"size":{"shortest_edge":262144,"longest_edge":8388608}}' \
    --compilation-config '{"compile_mm_encoder":true,"cudagraph_mm_encoder":true}' > "$OUT/reason2_plain_server.log" 2>&1 &
  pid=$!
  echo "plain ready after $(ready http://127.0.0.1:8000 $pid) s"
  bench plain http://127.0.0.1:8000 "$PHASES" --extra-body '{"mm_processor_kwargs":{"device":"cuda"}}'
  kill $pid; wait $pid; gzip -f "$OUT/reason2_plain_server.log" ;;
graph)
  t0=$(date +%s)
  bash benchmarks/gpu_machine.sh serve configs/h200-reason2.yaml model.model_id=$CK model.engine_args.load_format=dummy \
    model.allow_ignore_eos=true model.served_model_name=cosmos-reason2-8b-dummy 'model.system_prompt=""' \
    "sources.allowed_roots=[\"$W\"]" || exit 5  # no system message, as plain gets none from vllm bench serve: equal prompts
  echo "graph RUNNING after $(( $(date +%s) - t0 )) s"
  bench graph http://127.0.0.1:8000 "$PHASES"
  cp /tmp/serve.log "$OUT/reason2_graph_serve.log" && gzip -f "$OUT/reason2_graph_serve.log"
  RAY_AUTH_MODE=token serve shutdown -y >/dev/null 2>&1; ray stop --force >/dev/null 2>&1 ;;
esac
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
