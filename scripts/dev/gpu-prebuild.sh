#!/usr/bin/env bash
# Builds what scripts/dev/gpu-check.sh runs (the library, the GPU test suite, the GPU benchmarks,
# parallel_compile) on a build machine that has the CUDA toolkit but no GPU, and packs it
# into .gpuprebuilt/flgpu-build.tar.gz, so that the GPU host's scarce time goes to running
# tests rather than compiling them. gpu-check.sh unpacks it when FLOWLANE_GPU_PREBUILT names
# it, checks that the binaries start there, and builds from source if they do not.
#   scripts/dev/gpu-prebuild.sh        (then carry .gpuprebuilt and .deps to the GPU host)
# The build lives at an absolute path (FLOWLANE_GPU_PREBUILD_DIR, default /tmp/flgpu-build)
# that the tarball recreates on the GPU host, so the binaries' run paths stay valid. Shared
# libraries the GPU host may lack (Debian's Google Benchmark) travel in its carried-lib/.
# gpu-check.sh refuses a tarball built from other sources than the checkout it runs in: the
# tarball records a hash of the sources (`scripts/dev/gpu-prebuild.sh --source-hash` prints the
# checkout's; it needs no git, which the GPU host's copy may lack).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source_hash() {
  find CMakeLists.txt core capi gpu comm tests bench examples -type f \
       \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.c' -o -name 'CMakeLists.txt' \
          -o -name '*.cmake' \) -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [[ "${1:-}" == --source-hash ]]; then
  source_hash
  exit 0
fi
B=${FLOWLANE_GPU_PREBUILD_DIR:-/tmp/flgpu-build}
[[ "$B" == /* ]] || { echo "gpu-prebuild: FLOWLANE_GPU_PREBUILD_DIR must be absolute" >&2; exit 2; }
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DFLOWLANE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
cmake --build "$B" -j "$(nproc)" --target flowlane flowlane_gpu_tests gpu_bench_gpu parallel_compile
mkdir -p "$B/carried-lib"
for bin in "$B/tests/flowlane_gpu_tests" "$B/bench/gpu_bench_gpu" "$B/examples/parallel_compile"; do
  ldd "$bin" | awk '/libbenchmark/ {print $3}' | while read -r lib; do cp -L "$lib" "$B/carried-lib/"; done
done
git rev-parse HEAD > "$B/prebuilt-commit"
git diff --quiet HEAD -- . || echo "dirty" >> "$B/prebuilt-commit"
echo "source $(source_hash)" >> "$B/prebuilt-commit"
mkdir -p .gpuprebuilt
grep -qxF '/.gpuprebuilt/' .git/info/exclude 2>/dev/null || echo '/.gpuprebuilt/' >> .git/info/exclude
rel=${B#/}
(cd / && tar -czf "$root/.gpuprebuilt/flgpu-build.tar.gz" "$rel"/capi/libflowlane.so* \
  "$rel/tests/flowlane_gpu_tests" "$rel/bench/gpu_bench_gpu" "$rel/examples/parallel_compile" \
  "$rel/carried-lib" "$rel/prebuilt-commit")
echo "$B" > .gpuprebuilt/build-dir
ls -la .gpuprebuilt
