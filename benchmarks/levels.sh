#!/bin/bash
# Sourced by benchmarks/fleet_gpu.sh and benchmarks/quiet_scenes_gpu.sh: when a sweep of camera levels stops.
# LEVELS ascending (e.g. 24,30,36): after the first level that does not keep up. Descending (e.g. 20,16,12):
# after the first that keeps up, so one device call brackets a limit from above (2026-12-07: bf16 failed at 20
# in one call and at 12 in the next).

# levels_descending LEVELS: true when the first of the comma-separated LEVELS is above the second.
levels_descending() { local lv; read -r -a lv <<< "${1//,/ }"; [ "${#lv[@]}" -ge 2 ] && [ "${lv[0]}" -gt "${lv[1]}" ]; }

# level_ends_sweep DESCENDING RC: true when the sweep stops after a level whose load test exited RC (0: kept up).
level_ends_sweep() { if [ "$1" = 1 ]; then [ "$2" = 0 ]; else [ "$2" != 0 ]; fi; }
