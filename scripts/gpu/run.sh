#!/usr/bin/env bash
# Runs the GPU kit that build.sh made (target/gpu-kit) on a GPU machine with no Rust: the
# figures the open benchmark work needs, most needed first, each step under its own time limit
# so that a short loan still brings back the first ones. Writes one folder per step under OUT
# (default: ./gpu-results), with each step's log beside it.
#
#   target/gpu-kit/run.sh [OUT] [SECONDS]   # SECONDS: the whole run's budget (default 540)
set -uo pipefail
kit="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${OUT:-gpu-results}}"
budget="${2:-540}"
mkdir -p "$out"
start=$(date +%s)

unpack() { # <name>: the binary, decompressed (xz, or Python's lzma where xz is missing)
  local bin="$kit/mpric-bench-$1"
  if [ ! -x "$bin" ]; then
    if command -v xz >/dev/null; then
      xz -dkf "$bin.xz"
    else
      python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" \
        "$bin.xz" "$bin"
    fi
    chmod +x "$bin"
  fi
  echo "$bin"
}

step() { # <name> <seconds> <binary> <args...>: skipped once the budget is spent
  local name=$1 limit=$2 bin=$3
  shift 3
  local left=$((budget - ($(date +%s) - start)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 20 ]; then
    echo "skipped $name: the budget is spent" | tee -a "$out/steps.txt"
    return
  fi
  echo "== $name (at most ${limit}s): $*" | tee -a "$out/steps.txt"
  local t0=$(date +%s)
  timeout "$limit" "$bin" "$@" --out "$out/$name" >"$out/$name.log" 2>&1
  echo "   exit $? after $(($(date +%s) - t0))s" | tee -a "$out/steps.txt"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  cat "$kit/commit" 2>/dev/null
} >"$out/machine.txt"
bare=$(unpack bare)
fused=$(unpack fused)
vulkan=$(unpack vulkan)

# Cross-vendor matrix units: the mixed matmul up to 8192 and the training steps on SPIR-V
# (`vulkan`) beside WGSL (`wgpu`, the fused binary) and CUDA, each against its own f32 rows;
# mixed bf16 runs on SPIR-V where the driver has bf16 (WGSL never does).
step vulkan 100 "$vulkan" --backend vulkan --backend cuda --workload matmul \
  --workload transformer_block_step --workload mlp_step --full --seconds-per-group 2
step wgsl-matmul 60 "$fused" --backend wgpu --workload matmul --full --seconds-per-group 2
# The steps the cost model predicts (BENCHMARKS.md 2026-12-07: the transformer block, the
# activation-heavy step and the MLP on bare CUDA and Wgpu), then where the mixed transformer
# step spends its time op by op (0.21) and kernel by kernel (0.22): the per-op times the
# model's one bandwidth per workload stands in for.
step steps-bare 150 "$bare" --backend cuda --backend wgpu --workload transformer_block_step \
  --workload transformer_activations_step --workload mlp_step --full --seconds-per-group 2
step profile 120 "$bare" --profile --full --backend cuda --backend wgpu
# The same steps on Burn's default (fused) backends.
step steps-fused 150 "$fused" --backend cuda --backend wgpu --workload transformer_block_step \
  --workload transformer_activations_step --workload mlp_step --full --seconds-per-group 2
# Adam's bf16 state and master weights on CUDA (Wgpu runs no bf16): each mode's bytes, step
# time and what its optimizer step uploads, with stochastic rounding's uniforms drawn on the
# host and made on the device.
step optimizer 90 "$fused" --optimizer --backend cuda --full --seconds-per-group 2
# The loss scaler's device path on the fused backends, then bare.
step scaler-fused 120 "$fused" --backend cuda --backend wgpu --workload loss_scaler_step \
  --full --seconds-per-group 3
step scaler-bare 90 "$bare" --backend cuda --workload loss_scaler_step --full \
  --seconds-per-group 3
# The cost model's predictions for this binary (CPU only), beside the measured steps.
step cost 60 "$bare" --cost
echo "total $(($(date +%s) - start))s" | tee -a "$out/steps.txt"
