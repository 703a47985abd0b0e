#!/bin/bash
# Runs ON THE GPU MACHINE (device tool), from the project root, once the
# bundle is staged (bash .gpu-bundle/pK/stage.sh N; see docs/gpu.md and CONTRIBUTING.md).
#   bash benchmarks/gpu_machine.sh tests [PATHS] [ARGS] # tests/gpu (or PATHS) -> $OUT/gpu-junit.xml, gpu-tests.log
#   bash benchmarks/gpu_machine.sh bench [ARGS]       # python -m benchmarks.gpu -> $OUT/gpu_bench.json
#   bash benchmarks/gpu_machine.sh engine NAME [ARGS] # python -m benchmarks.engine_profile -> $OUT/engine_profile.NAME.json
#   bash benchmarks/gpu_machine.sh freeze             # the exact package set there -> $OUT/gpu-freeze.txt
#   bash benchmarks/gpu_machine.sh prep [N] [CLIP]    # byte-compile /root/site, cut N windows of CLIP (the car
#                                                     # clip, 30 s) into /tmp/xwin; more than ~250 windows: a longer
#                                                     # clip (.gpu-clips/intel_one-by-one-person-detection.mp4, 139 s)
#   bash benchmarks/gpu_machine.sh lifecycle --config C [ARGS]  # python -m benchmarks.lifecycle -> $OUT/lifecycle.json
#   bash benchmarks/gpu_machine.sh serve CONFIG [key=value ...]   # serve run a derived config (background),
#                                                     # returns once the app is RUNNING (<= 300 s)
#   bash benchmarks/gpu_machine.sh pack-out [MAX]     # last in a call: more than MAX (8) files under $OUT ->
#                                                     # one $OUT/out.tgz (a device call returns at most 8 files and
#                                                     # drops the rest: 2026-12-07 lost a loop step's lifecycle.json)
set -uo pipefail
export PYTHONPATH=/root/site:$PWD PATH=/root/site/bin:$PATH
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ "${1:-}" = pack-out ]; then  # needs no staged bundle: only tar
  max=${2:-8}; n=$(find "$OUT" -type f | wc -l)
  if [ "$n" -le "$max" ]; then echo "pack-out: $n files under \$OUT, at most $max: left as they are"; exit 0; fi
  tmp=$(mktemp /tmp/pack-out.XXXXXX)
  tar czf "$tmp" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "$tmp" "$OUT/out.tgz" || exit 1
  echo "pack-out: $n files under \$OUT -> out.tgz (tar xzf out.tgz)"; exit 0
fi
[ -f /root/site/.done ] || { echo "gpu_machine: bundle not staged on this machine (/root/site/.done missing)"; exit 3; }
cmd=${1:?usage: gpu_machine.sh tests|bench|serve ...}; shift
case "$cmd" in
  tests)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu-info.txt"
    # A test path among the arguments replaces tests/gpu (2026-12-02: `tests tests/gpu/x.py` ran all of tests/gpu)
    where=tests/gpu; for a in "$@"; do case "$a" in tests/*) where=;; esac; done
    python3 -m pytest $where -v -p no:cacheprovider --junitxml="$OUT/gpu-junit.xml" "$@" 2>&1 \
      | tee "$OUT/gpu-tests.log" | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|error" ;;
  freeze)
    # Every distribution importable there (the image's and the bundle's in /root/site), as name==version.
    python3 - <<'PY' > "$OUT/gpu-freeze.txt"
import importlib.metadata as md, platform, sys
seen = {}
for d in md.distributions():
    name = (d.metadata["Name"] or "").lower().replace("_", "-")
    if name and name not in seen:
        seen[name] = d.version
print(f"# python {platform.python_version()} on {platform.machine()}; sys.path first: {sys.path[1:3]}")
for n in sorted(seen):
    print(f"{n}=={seen[n]}")
PY
    wc -l "$OUT/gpu-freeze.txt" ;;
  bench)
    python3 -m benchmarks.gpu --out "$OUT/gpu_bench.json" "$@" > "$OUT/bench.log" 2>&1
    rc=$?; grep -E "^\||Error|error|Traceback" "$OUT/bench.log" | tail -40; exit $rc ;;
  engine)
    name=${1:?engine NAME [ARGS]}; shift
    python3 -m benchmarks.engine_profile --out "$OUT/engine_profile.$name.json" \
      --windows-dir "/tmp/windows-$name" "$@" > "$OUT/engine_profile.$name.log" 2>&1
    rc=$?; mv "$OUT/engine_profile.$name.trace"/profiler_out_0.txt "$OUT/engine_profile.$name.kernels.txt" 2>/dev/null
    rm -rf "$OUT/engine_profile.$name.trace"; tail -30 "$OUT/engine_profile.$name.log"; exit $rc ;;
  prep)
    # Byte-compile the staged packages in parallel (pip does this on a normal install; the bundle is
    # installed with --no-compile, which would charge the first import of vLLM with it), and cut
    # N distinct 10-s windows of the reference clip into /tmp/xwin (under the lifecycle run's allowed roots).
    # Wheels shipped in .whl/ (carry it) are installed over the bundle first: a dependency added to
    # pyproject.toml after the bundle was built (tenacity, 2026-12-02) otherwise fails the app's import.
    # Not `pip install --target /root/site --upgrade`: that replaces /root/site/bin with the wheels' own scripts
    # (dashscope's), and the `serve` CLI was gone on 2026-12-02. Each package replaces its namesake; scripts are added.
    if ls .whl/*.whl >/dev/null 2>&1; then
      rm -rf /tmp/whl-site
      python3 -m pip install -q --no-deps --target /tmp/whl-site .whl/*.whl > /tmp/whl-pip.log 2>&1 \
        || { cat /tmp/whl-pip.log; echo "prep: the wheels in .whl/ did not install"; exit 6; }
      for p in /tmp/whl-site/*; do
        n=$(basename "$p"); [ "$n" = bin ] && continue
        case "$n" in *.dist-info) rm -rf /root/site/"${n%%-*}"-*.dist-info;; *) rm -rf /root/site/"$n";; esac
        cp -r "$p" /root/site/
      done
      [ -d /tmp/whl-site/bin ] && cp -n /tmp/whl-site/bin/* /root/site/bin/
    fi
    command -v serve >/dev/null || { echo "prep: the serve CLI is missing from /root/site/bin"; exit 7; }
    python3 - <<'PY' || exit 6
import importlib.metadata as md, re, sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
names = [re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0] for d in deps]
missing = []
for n in names:
    try:
        md.version(n)
    except md.PackageNotFoundError:
        missing.append(n)
if missing:
    sys.exit(f"prep: missing on this machine: {', '.join(missing)}; build the bundle with them "
             f"(bash ../shared/gpu/make-bundle.sh {' '.join(missing)}) or ship their wheels in .whl/ (carry .whl)")
print(f"prep: the project's {len(names)} dependencies are installed")
PY
    t0=$(date +%s); python3 -m compileall -q -j 16 /root/site >/dev/null 2>&1; echo "prep: byte-compiled in $(( $(date +%s) - t0 )) s"
    # Windows closer than one source frame (the car clip: 12.5 fps) could hold the same frames: over ~250 of
    # the 30-s car clip, name the 139-s clip (10 fps; 720 windows start 0.18 s apart).
    python3 - "${1:-80}" "${2:-tests/data/intel_car-detection.mp4}" <<'PY' || exit 6
import sys, av
from pathlib import Path
from benchmarks.workload import cut_window_files, windows
clip = Path(sys.argv[2])
with av.open(str(clip)) as c:
    dur = float(c.duration / 1e6)
files = cut_window_files(windows(clip, int(sys.argv[1]), dur), Path("/tmp/xwin"), workers=12)
print("prep:", len(files), "windows in /tmp/xwin")
PY
    ;;
  lifecycle)
    # python -m benchmarks.lifecycle CONFIG-AND-ARGS -> $OUT/lifecycle.json (+ serve log, stacks)
    python3 -m benchmarks.lifecycle --out "$OUT/lifecycle.json" "$@" 2>&1 | tee "$OUT/lifecycle.log" | grep -E "^==|Error|Traceback"
    gzip -f "$OUT/lifecycle_serve.log" 2>/dev/null; gzip -f "$OUT/lifecycle_stacks.txt" 2>/dev/null; true ;;
  serve)
    # `serve status` (CLI, via the dashboard) hung on the GPU machine on 2026-11-30: wait with
    # serve.status() over the Ray client API instead, under a hard timeout.
    config=${1:?config}; shift
    python3 -m serve_app.config override "$config" "$@" -o /tmp/derived.yaml || exit 4
    command -v serve >/dev/null || { echo "serve: no serve CLI on PATH (run prep)"; exit 4; }
    setsid nohup serve run /tmp/derived.yaml > /tmp/serve.log 2>&1 < /dev/null &
    spid=$!; t0=$(date +%s)
    # On failure, stop what was started: a setsid'd `serve run` outlives this call and keeps the GPU.
    stop_started() { tail -c 3000 /tmp/serve.log; kill -INT -- -$spid 2>/dev/null; sleep 5; ray stop --force >/dev/null 2>&1; }
    SPID=$spid timeout 300 python3 - <<'PY' || { stop_started; exit 5; }
import logging, os, time, yaml, ray
from ray import serve
name = yaml.safe_load(open("/tmp/derived.yaml"))["applications"][0]["name"]
def alive():  # `serve run` gone (no CLI, a bad config): stop waiting at once
    try:
        os.kill(int(os.environ["SPID"]), 0)
    except ProcessLookupError:
        raise SystemExit("serve run exited; its log follows")
while True:  # the cluster appears once `serve run` has started it
    alive()
    try:
        ray.init(address="auto", log_to_driver=False, logging_level=logging.ERROR)
        break
    except Exception:
        time.sleep(1)
while True:
    st = serve.status().applications.get(name)
    if st is not None and st.status == "RUNNING":
        break
    if st is not None and st.status == "DEPLOY_FAILED":
        raise SystemExit(st.message)
    alive()
    time.sleep(1)
PY
    echo "serve: app ready after $(( $(date +%s) - t0 )) s";;
  *) echo "unknown command $cmd"; exit 2;;
esac
