#!/bin/bash
# Sourced by benchmarks/fleet_gpu.sh and benchmarks/quiet_scenes_gpu.sh: a file name under $OUT that no earlier
# phase of the same device call wrote, and the running server's log so far. A server's start and stop leave
# fixed names (its derived config, its log), and one call may stop one server and start the next (2026-12-07: two
# stops in one call wrote fleet_graph_serve.log.gz twice, and the first server's whole log was lost).

# out_path NAME: "$OUT/NAME" when free, else "$OUT/STEM.2.EXT", "$OUT/STEM.3.EXT", ... where NAME is STEM.EXT
# split at its first dot (fleet_graph_serve.log.gz: fleet_graph_serve.2.log.gz).
out_path() {
  local name=$1 stem ext k=2
  [ -e "$OUT/$name" ] || { echo "$OUT/$name"; return; }
  stem=${name%%.*}; ext=${name#"$stem"}
  while [ -e "$OUT/$stem.$k$ext" ]; do k=$((k + 1)); done
  echo "$OUT/$stem.$k$ext"
}

# log_so_far LOG PATH: the running server's log so far, gzipped to PATH, after each phase that loads it (a sweep, a
# burst, a cross-check); nothing when LOG is absent. `stop` brings the whole log back, but a machine lost before it
# took vLLM's stats lines (running and waiting requests) with it (2026-12-07: the twenty-fifth lease's levels).
log_so_far() {
  [ -f "$1" ] || return 0
  mkdir -p "$(dirname "$2")" && gzip -c "$1" > "$2"
}
