#!/usr/bin/env bash
# Every benchmark, one after the other, from the repository root:
#
#   benchmarks/run_all.sh            # the figures in benchmarks/README.md (many minutes on CPU)
#   benchmarks/run_all.sh --quick    # smoke run: every benchmark starts and finishes; figures meaningless
#
# Results go to stdout, and as JSON to $BENCH_OUT (default runs/benchmarks-<stamp>/).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=()
collectives=()
case "${1:-}" in
  --quick) quick=(--quick); collectives=(--sizes 1K:64K --iters 5 --warmup 1) ;;
  "") ;;
  *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac

out="${BENCH_OUT:-runs/benchmarks-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
py="${PYTHON:-python}"

echo "== profiler overhead: benchmarks/bench_overhead.py ${quick[*]}"
"$py" benchmarks/bench_overhead.py "${quick[@]}" --json "$out/overhead.json"

if [[ -f benchmarks/bench_analyze.py ]]; then
  echo "== analysis speed: benchmarks/bench_analyze.py ${quick[*]}"
  "$py" benchmarks/bench_analyze.py "${quick[@]}"
fi

echo "== perfetto: benchmarks/bench_perfetto.py ${quick[*]}"
"$py" benchmarks/bench_perfetto.py "${quick[@]}"

echo "== collectives: python -m profile_overlap bench-collectives --nproc-per-node 4 ${collectives[*]}"
"$py" -m profile_overlap bench-collectives --nproc-per-node 4 "${collectives[@]}" --out "$out" --json "$out/collectives.json"

echo "== results in $out"
