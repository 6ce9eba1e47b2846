#!/usr/bin/env bash
# The GPU check, one prepared command for a CUDA machine:   bash tests/gpu/check.sh
#
# Runs all five modes (our three schedules, DDP and FSDP2), mlp then transformer, on NCCL with world size = the number of GPUs (1 works), at sizes that keep an
# H200 busy for a few seconds per mode, then checks what a GPU trace must show and prints a
# table. Traces and the run folder go to $OUT when it is set (the device tool's output folder).
#
# With one GPU, NCCL runs with world size 1 and does no real communication: its one-rank path
# launches no NCCL kernel, so this covers the CUDA path, streams, CUDA events and the profiler's
# CUDA activity, not NCCL kernels; the output says so. Real multi-rank NCCL traces are in
# tests/data (from shared/traces) and are checked in CI.
#
# Machines without internet: carry the wheels the image lacks (msgspec; orjson for the plugin)
# in .whl/ (see the device tool's README: pip download --python-version 3.12 ... msgspec) and
# this script installs them into /tmp/site first.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
if ! python3 -c "import msgspec" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "msgspec is missing and no wheels in .whl/: carry them (see this script's header)"; exit 2
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT_DIR="${OUT:-$(mktemp -d)}"
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "$NGPU" -ge 1 ] || { echo "no CUDA device visible"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# d=8192, K=8: P = 537M parameters (2 GiB in bf16), B=8192 rows: each forward layer is a
# 8192^3 matmul (~1.1 TFLOP), each step a few hundred ms on an H200.
timeout 500 python3 -m torch.distributed.run --standalone --nproc-per-node "$NGPU" -m profile_overlap \
  --mode compare --modes sequential,split,split-blocking,ddp,fsdp2 --backend nccl --dtype bfloat16 --layers 8 --dim 8192 --batch 8192 \
  --steps 10 --warmup-steps 2 --profile-steps 2 --out "$OUT_DIR" --name gpu-check 2>&1 | grep -v '^W1' | tee "$OUT_DIR/gpu-check.log"

python3 tests/gpu/check_traces.py "$OUT_DIR/gpu-check" "$NGPU"

# The transformer: 8 blocks of d=2048 (50M parameters each), 16 sequences of 1024 tokens per step.
timeout 500 python3 -m torch.distributed.run --standalone --nproc-per-node "$NGPU" -m profile_overlap \
  --mode compare --modes sequential,split,split-blocking,ddp,fsdp2 --backend nccl --dtype bfloat16 --model transformer --layers 8 --dim 2048 --heads 16 \
  --batch 16 --seq-len 1024 --steps 10 --warmup-steps 2 --profile-steps 2 --out "$OUT_DIR" --name gpu-check-transformer 2>&1 \
  | grep -v '^W1' | tee "$OUT_DIR/gpu-check-transformer.log"
python3 tests/gpu/check_traces.py "$OUT_DIR/gpu-check-transformer" "$NGPU"
