#!/usr/bin/env bash
# The GPU check: one prepared command that fits one device call (under 8 minutes on one H200).
#
#     bash tests/gpu/check.sh                # from the repo root, on a CUDA machine
#     bash tests/gpu/check.sh --cpu-dry-run  # the same commands at toy sizes on gloo (CPU)
#     bash tests/gpu/check.sh --print-commands  # only print the GPU commands, one per line (tests/test_gpu.py parses them)
#
# Writes everything (run folders with their traces, the user jobs, the logs and table.txt, the
# table a reader checks) to a fresh folder under ${OUT:-/tmp/gpu_check} (OUT: the device tool's
# folder whose files come back). Exit 0 only when every command and every check passed.
#
# What it covers, on NCCL with one rank per GPU (world size 1 on one GPU):
#   1. all five modes (sequential, split, split-blocking, ddp, fsdp2) on the mlp (d=8192, K=8,
#      8192 rows: P = 537M parameters, 1 GiB in bfloat16; each layer's forward a 8192^3 matmul,
#      ~1.1 TFLOP, about 45 ms of GPU math per step on an H200) and on the transformer (8 blocks
#      of d=2048, 16 sequences of 1024 tokens); their verification passes;
#   2. per mode (check_traces.py): CUDA-event timing, CUDA kernels in every phase, a timed step
#      that takes what the GPU's kernels take per profiled step (so modes differ as their work
#      does, not by host work), each mode's own peak memory, split's peak below sequential's by
#      its optimizer-state saving (none at world size 1, where split's shard is the whole unit);
#      with 2 or more GPUs, NCCL kernels, and the async modes' on streams of their own (a
#      blocking collective runs on the current stream by design in torch 2.13, PR 150398);
#   3. a user's job (examples/ddp_train.py, examples/fsdp2_train.py) writes its record;
#   4. analyze, report, perfetto and advise on the mlp run's GPU traces.
# With one GPU, NCCL's one-rank path launches no NCCL kernel: the table says so, and nothing is
# made up for it. Real multi-rank NCCL traces are checked in CI from tests/data.
#
# --cpu-dry-run runs every command above with the same flags at toy sizes on 2 gloo ranks, so that every
# command, flag and path is exercised for real on a machine without a GPU; the checker then runs
# too and reports the GPU expectations a CPU run fails (CUDA events, kernels, peaks): those are
# shown, not counted, and the dry run exits 0 when every command ran.
#
# Time budgets (timeout, seconds): 120 + 100 + 50 + 50 + 15 + 20 + 15 + 25 + 4 x 8 = 427 < 480,
# plus at most 3 s of grace per command when one overruns. Assumed installed on the device:
# python3 with torch (CUDA build); msgspec, or its wheel in .whl/ (installed into /tmp/site).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1

DRY=0
PRINT=0
case "${1:-}" in
  "") ;;
  --cpu-dry-run) DRY=1 ;;
  --print-commands) PRINT=1 ;;
  *) echo "usage: bash tests/gpu/check.sh [--cpu-dry-run | --print-commands]"; exit 2 ;;
esac

if [ "$PRINT" = 0 ] && ! python3 -c "import msgspec" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "msgspec is missing and there are no wheels in .whl/: carry them (pip download --python-version 3.12 --only-binary :all: msgspec)"; exit 2
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

ROOT="${OUT:-/tmp/gpu_check}"
DIR="$ROOT/gpu-check-$(date +%Y%m%d-%H%M%S)"
if [ "$PRINT" = 1 ]; then DIR="$ROOT/gpu-check"; else mkdir -p "$DIR" || { echo "cannot create $DIR: set OUT to a writable folder"; exit 2; }; fi
TABLE="$DIR/table.txt"
FAILED=()

if [ "$DRY" = 1 ]; then
  NGPU=2  # two CPU ranks: at world size 1 gloo moves nothing, and the analysis refuses a trace with no communication
  BACKEND=(--backend gloo)
  MLP=(--layers 2 --dim 64 --batch 16)
  TRANSFORMER=(--layers 2 --dim 64 --heads 4 --batch 2 --seq-len 16)
  EXAMPLE=(--layers 1 --dim 32 --batch 2 --seq-len 16)
  echo "CPU dry run: toy sizes on gloo; the checker's GPU expectations are shown, not counted" | tee "$TABLE"
else
  if [ "$PRINT" = 1 ]; then
    NGPU=1
  else
    NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())") || NGPU=0
    [ "$NGPU" -ge 1 ] || { echo "no CUDA device visible (bash tests/gpu/check.sh --cpu-dry-run runs the commands on CPU)"; exit 2; }
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$TABLE" || true
  fi
  BACKEND=(--backend nccl)
  MLP=(--layers 8 --dim 8192 --batch 8192)
  TRANSFORMER=(--layers 8 --dim 2048 --heads 16 --batch 16 --seq-len 1024)
  EXAMPLE=(--layers 4 --dim 512 --batch 8 --seq-len 512)
fi
MODES=(--mode compare --modes sequential,split,split-blocking,ddp,fsdp2 --dtype bfloat16 --steps 10 --warmup-steps 2 --profile-steps 2)

# step NAME SECONDS COMMAND...: run it under its budget, its output into $DIR/NAME.log.
step() {
  local name=$1 budget=$2
  shift 2
  if [ "$PRINT" = 1 ]; then printf 'step %s %s' "$name" "$budget"; printf ' %q' "$@"; echo; return 0; fi
  local started=$SECONDS rc
  timeout -k 3 "$budget" "$@" >"$DIR/$name.log" 2>&1
  rc=$?
  grep -v '^W1' "$DIR/$name.log" | tail -n 25
  if [ "$rc" -eq 0 ]; then
    echo "ok      $name ($((SECONDS - started)) s of $budget)" | tee -a "$TABLE"
  else
    local what="exit $rc"
    [ "$rc" -eq 124 ] && what="timed out after $budget s"
    echo "FAILED  $name: $what (log: $DIR/$name.log)" | tee -a "$TABLE"
    FAILED+=("$name")
  fi
  return "$rc"
}

# check NAME ARGS...: the checker, its table appended to table.txt; on the dry run shown, not counted.
check() {
  local name=$1
  shift
  if [ "$PRINT" = 1 ]; then printf 'check %s 8 python3 tests/gpu/check_traces.py' "$name"; printf ' %q' "$@"; echo; return 0; fi
  timeout -k 3 8 python3 tests/gpu/check_traces.py "$@" 2>&1 | tee -a "$TABLE"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ] && [ "$DRY" = 0 ]; then FAILED+=("$name"); fi
}

TORCHRUN=(python3 -m torch.distributed.run --standalone --nproc-per-node "$NGPU")

step mlp 120 "${TORCHRUN[@]}" -m profile_overlap "${MODES[@]}" "${BACKEND[@]}" "${MLP[@]}" --out "$DIR" --name mlp
check check-mlp "$DIR/mlp" "$NGPU"
step transformer 100 "${TORCHRUN[@]}" -m profile_overlap "${MODES[@]}" "${BACKEND[@]}" --model transformer "${TRANSFORMER[@]}" \
  --out "$DIR" --name transformer
check check-transformer "$DIR/transformer" "$NGPU"

step job-ddp 50 "${TORCHRUN[@]}" examples/ddp_train.py --out "$DIR/job-ddp" --steps 8 "${EXAMPLE[@]}"
check check-job-ddp --job "$DIR/job-ddp" "$NGPU"
step job-fsdp2 50 "${TORCHRUN[@]}" examples/fsdp2_train.py --out "$DIR/job-fsdp2" --steps 8 "${EXAMPLE[@]}"
check check-job-fsdp2 --job "$DIR/job-fsdp2" "$NGPU"

if [ "$PRINT" = 1 ] || [ -f "$DIR/mlp/metrics.json" ]; then
  step analyze 15 python3 -m profile_overlap analyze "$DIR/mlp/sequential" --json "$DIR/analyze-mlp-sequential.json"
  step report 20 python3 -m profile_overlap report "$DIR/mlp" --out "$DIR/report-mlp"
  step perfetto 15 python3 -m profile_overlap perfetto "$DIR/mlp" --out "$DIR/mlp.perfetto.json.gz"
  step advise 25 python3 -m profile_overlap advise "$DIR/mlp" --json "$DIR/advice-mlp.json"
else
  echo "FAILED  analyze, report, perfetto, advise: the mlp run wrote no record" | tee -a "$TABLE"
  FAILED+=(analyze report perfetto advise)
fi

[ "$PRINT" = 1 ] && exit 0
echo | tee -a "$TABLE"
if [ "${#FAILED[@]}" -eq 0 ]; then
  if [ "$DRY" = 1 ]; then
    echo "CPU dry run: every command ran (the GPU expectations above are not counted); results in $DIR" | tee -a "$TABLE"
  else
    echo "GPU check PASSED: every command and check; results in $DIR (table.txt)" | tee -a "$TABLE"
  fi
  exit 0
fi
echo "GPU check FAILED: ${FAILED[*]}; results in $DIR (table.txt and the logs)" | tee -a "$TABLE"
exit 1
