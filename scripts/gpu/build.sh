#!/usr/bin/env bash
# Builds the GPU kit on a machine with the Rust toolchain: the bench binary with the CUDA
# backend, once with Burn's kernels as the workspace builds them, once with Burn's default
# fusion and autotuning, and once more fused with Wgpu compiled to SPIR-V (`vulkan`), stripped
# and compressed into target/gpu-kit (about 55 MB in all),
# small enough to travel to a GPU machine that has no Rust and no internet. run.sh runs it there.
#
#   scripts/gpu/build.sh            # CUDA 13.0 driver (CUDARC_CUDA_VERSION=13000)
#   CUDARC_CUDA_VERSION=12080 scripts/gpu/build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13000}"
kit=target/gpu-kit
rm -rf "$kit"
mkdir -p "$kit"

build() { # <name> <features>
  # A target folder of its own: the two feature sets would otherwise rebuild Burn in turn.
  cargo build --release -p burn-mpric-bench --features "$2" --target-dir "target/gpu-$1"
  strip -o "$kit/mpric-bench-$1" "target/gpu-$1/release/mpric-bench"
  xz -T0 -6 -f "$kit/mpric-bench-$1"
}
build bare cuda
build fused cuda,fusion
# Burn's Wgpu compiled to SPIR-V (one compiler per build: this binary's Wgpu rows are `vulkan`),
# fused as users build it: Vulkan's cooperative matrices and bf16 where the driver has them.
build vulkan cuda,fusion,vulkan
cp scripts/gpu/run.sh "$kit/"
git rev-parse HEAD >"$kit/commit"
du -sh "$kit"/*
