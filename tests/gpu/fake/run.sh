#!/usr/bin/env bash
# Runs fake_engine_test against the fake CUDA runtime (no GPU needed). Needs a CUDA build
# of libflowlane: BUILD (default build-gpu) configured with -DFLOWLANE_WITH_CUDA=ON.
#   tests/gpu/fake/run.sh [gtest args]
# Under ThreadSanitizer: BUILD=<a CUDA build with -DFLOWLANE_SANITIZE=thread> FAKE_FLAGS=-fsanitize=thread
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BUILD=${BUILD:-$root/build-gpu}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
FAKE_FLAGS=${FAKE_FLAGS:-}
tmp=${TMPDIR:-/tmp}/flowlane-fake-gpu${FAKE_FLAGS:+-san}
mkdir -p "$tmp"
here="$root/tests/gpu/fake"
g++ -std=c++20 -O1 -g $FAKE_FLAGS -shared -fPIC -Wall -I"$CUDA_INC" "$here/fake_cudart.cpp" -o "$tmp/libfakecudart.so" -lpthread
g++ -std=c++20 -O1 -g $FAKE_FLAGS -Wall -I"$CUDA_INC" -I"$root/capi/include" -I"$here" "$here/fake_engine_test.cpp" \
  -o "$tmp/fake_engine_test" -L"$BUILD/capi" -lflowlane -L"$tmp" -lfakecudart -lgtest -lgtest_main -lpthread \
  -Wl,-rpath,"$BUILD/capi" -Wl,-rpath,"$tmp"
if [ -n "$FAKE_FLAGS" ]; then
  # The sanitizer runtime must come first; the fake is found through the rpath, ahead of
  # libcudart because the test links it before libflowlane's own dependencies.
  "$tmp/fake_engine_test" "$@"
else
  LD_PRELOAD="$tmp/libfakecudart.so" "$tmp/fake_engine_test" "$@"
fi
