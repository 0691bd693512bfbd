#!/usr/bin/env bash
# Wall time of `mlops demo` from a clean state (a fresh MLOPS_HOME), after `make setup`.
# Usage: benchmarks/demo_wall_time.sh [ROWS ...]   (default: 30000, the demo's default size)
set -euo pipefail
cd "$(dirname "$0")/.."
make setup >/dev/null
printf '%-10s %-12s\n' rows wall_seconds
for rows in "${@:-30000}"; do
  home=$(mktemp -d)
  start=$(date +%s)
  MLOPS_HOME="$home" MLOPS_DEMO_ROWS="$rows" .venv/bin/mlops demo >"$home/demo.log" 2>&1
  end=$(date +%s)
  printf "%-10s %-12s\n" "$rows" "$((end - start))"
  rm -rf "$home"
done
