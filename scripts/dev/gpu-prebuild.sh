#!/usr/bin/env bash
# Builds what scripts/dev/gpu-check.sh and gpu-session.sh run (the library, the GPU test
# suite, the GPU benchmarks and their controls, the memory-operations probe,
# parallel_compile) on a build machine that has the CUDA toolkit but no GPU, and packs it
# into .gpuprebuilt/flgpu-build.tar.gz (ignored by .gitignore, else by git's exclude file), so that the GPU host's
# scarce time goes to running tests rather than compiling them. gpu-check.sh unpacks it when
# FLOWLANE_GPU_PREBUILT names it, checks that the binaries start there, and builds from
# source if they do not.
#   scripts/dev/gpu-prebuild.sh        (then carry .gpuprebuilt and .deps to the GPU host)
# The build lives at an absolute path (FLOWLANE_GPU_PREBUILD_DIR, default /tmp/flgpu-build)
# that the tarball recreates on the GPU host, so the binaries' run paths stay valid. Shared
# libraries the GPU host may lack (Debian's Google Benchmark) travel in its carried-lib/.
# gpu-check.sh refuses a tarball built from other sources than the checkout it runs in: the
# tarball records a hash of the sources (`scripts/dev/gpu-prebuild.sh --source-hash` prints the
# checkout's; it needs no git, which the GPU host's copy may lack).
# For tests: FLOWLANE_GPU_PREBUILD_SKIP_BUILD=1 packs the binaries already in
# FLOWLANE_GPU_PREBUILD_DIR, and FLOWLANE_GPU_PREBUILD_OUT (default .gpuprebuilt) names
# where the tarball goes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source_hash() {
  find CMakeLists.txt cmake core capi gpu comm tests bench examples -type f \
       \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.c' -o -name 'CMakeLists.txt' \
          -o -name '*.cmake' \) -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [[ "${1:-}" == --source-hash ]]; then
  source_hash
  exit 0
fi
B=${FLOWLANE_GPU_PREBUILD_DIR:-/tmp/flgpu-build}
[[ "$B" == /* ]] || { echo "gpu-prebuild: FLOWLANE_GPU_PREBUILD_DIR must be absolute" >&2; exit 2; }
out=${FLOWLANE_GPU_PREBUILD_OUT:-$root/.gpuprebuilt}
bins=(tests/flowlane_gpu_tests bench/gpu_bench_gpu bench/gpu_bench_gpu_controls bench/gpu_memops_probe
      examples/parallel_compile)
if [[ "${FLOWLANE_GPU_PREBUILD_SKIP_BUILD:-0}" != 1 ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DFLOWLANE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
  cmake --build "$B" -j "${FLOWLANE_GPU_PREBUILD_JOBS:-$(nproc)}" --target flowlane flowlane_gpu_tests gpu_bench_gpu \
    gpu_bench_gpu_controls gpu_memops_probe parallel_compile
fi
mkdir -p "$B/carried-lib"
for b in "${bins[@]}"; do
  # (A binary missing here fails the tar below.)
  { ldd "$B/$b" 2>/dev/null || true; } | awk '/libbenchmark/ {print $3}' | while read -r lib; do cp -L "$lib" "$B/carried-lib/"; done
done
# The commit, if this is a git checkout (in a worktree .git is a file: git answers all the same).
{ git rev-parse HEAD 2>/dev/null || echo "no-git"; } > "$B/prebuilt-commit"
git diff --quiet HEAD -- . 2>/dev/null || echo "dirty" >> "$B/prebuilt-commit"
echo "source $(source_hash)" >> "$B/prebuilt-commit"
mkdir -p "$out"
# A tarball inside the checkout must not show as untracked (a carried path has to be an
# ignored one). .gitignore names .gpuprebuilt/; a checkout whose .gitignore does not gets it
# in git's own exclude file, wherever git keeps it: in a worktree .git is a file, and
# `git rev-parse --git-path` names the common info/exclude.
if [[ "$out" == "$root"/* ]] && git rev-parse --git-dir > /dev/null 2>&1 && ! git check-ignore -q "$out"; then
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  echo "/${out#"$root"/}/" >> "$exclude"
fi
rel=${B#/}
(
  cd /  # the paths in the tarball are absolute ones without the leading /
  files=("$rel"/capi/libflowlane.so* "$rel/carried-lib" "$rel/prebuilt-commit")
  for b in "${bins[@]}"; do files+=("$rel/$b"); done
  tar -czf "$out/flgpu-build.tar.gz" "${files[@]}"
)
echo "$B" > "$out/build-dir"
ls -la "$out"
