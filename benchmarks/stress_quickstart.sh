#!/usr/bin/env bash
# Run the README's first Quickstart command N times and count the runs that did not end cleanly.
#
#   benchmarks/stress_quickstart.sh 30              # idle machine
#   benchmarks/stress_quickstart.sh 30 --burners 2  # with 2 busy CPU processes beside every run
#   benchmarks/stress_quickstart.sh 30 --user-job profile   # a user's plain DDP script instead
#
# --user-job API (profile, handler, or profile-no-destroy) runs tests/helpers/user_job.py on 2 ranks
# instead: a user's script profiled with profile_overlap.profile or trace_handler, ending with (or
# without) destroy_process_group, nothing added for the profiler's sake.
# Every run is stopped after 300 s: a run that hangs at exit counts as not clean (exit 124).
#
# A run is clean when it exits 0 and its output holds none of
# `terminate called|Traceback|core dumped|SIGABRT|SIGSEGV`. Prints one line per run, then the
# counts and the median wall time. The output of every failed run is kept under $STRESS_OUT
# (default runs/stress-<stamp>/); run folders go there too, so runs/ stays tidy.
# Exit status: 0 when every run was clean, 1 otherwise. Not run in CI (it takes minutes).
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 N [--burners K] [--user-job profile|handler|profile-no-destroy]" >&2; exit 2; }
[[ $# -ge 1 && "$1" =~ ^[1-9][0-9]*$ ]] || usage
runs=$1; shift
burners=0
user_job=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --burners) [[ "${2:-}" =~ ^[0-9]+$ ]] || usage; burners=$2; shift 2 ;;
    --user-job) [[ "${2:-}" =~ ^(profile|handler|profile-no-destroy)$ ]] || usage; user_job=$2; shift 2 ;;
    *) usage ;;
  esac
done

# The command, read from the README like .ci/run does, so the two never drift apart.
cmd=$(awk '/^## Quickstart/{q=1} q&&/^```bash/{b=1;next} b&&/^```/{exit} b' README.md | head -n 1)
cmd=${cmd#*&& }  # drop the `pip install -e . &&` part: the package is installed once, not N times
[[ "$cmd" == torchrun* ]] || { echo "could not read the Quickstart's torchrun command from README.md" >&2; exit 1; }
out="${STRESS_OUT:-runs/stress-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
cmd="$cmd --out $out/runs"
if [[ -n "$user_job" ]]; then
  api=${user_job%-no-destroy}
  cmd="torchrun --standalone --nproc-per-node 2 tests/helpers/user_job.py $out/runs --api $api"
  [[ "$user_job" == *-no-destroy ]] && cmd="$cmd --no-destroy"
fi
pattern='terminate called|Traceback|core dumped|SIGABRT|SIGSEGV'

pids=()
stop_burners() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop_burners EXIT
for ((b = 0; b < burners; b++)); do
  ( while :; do :; done ) &
  pids+=($!)
done

echo "command: $cmd"
echo "runs: $runs, burners: $burners, logs of failed runs: $out"
ok=0; bad_output=0; clean=0; times=()
for ((i = 1; i <= runs; i++)); do
  log="$out/run-$i.log"
  t0=$(date +%s.%N)
  timeout 300 bash -c "$cmd" >"$log" 2>&1
  code=$?
  t1=$(date +%s.%N)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')
  times+=("$wall")
  matched=$(grep -Ec "$pattern" "$log")
  [[ $code -eq 0 ]] && ok=$((ok + 1))
  [[ $matched -gt 0 ]] && bad_output=$((bad_output + 1))
  if [[ $code -eq 0 && $matched -eq 0 ]]; then
    clean=$((clean + 1)); rm -f "$log"; verdict=clean
  else
    verdict="NOT CLEAN (exit $code, $matched matching lines; $log)"
  fi
  printf 'run %d/%d: %.1f s, %s\n' "$i" "$runs" "$wall" "$verdict"
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "exited 0: $ok/$runs; printed '$pattern': $bad_output/$runs; clean: $clean/$runs; median wall time: $(printf '%.1f' "$median") s (burners: $burners)"
[[ $clean -eq $runs ]]
