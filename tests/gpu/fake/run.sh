#!/usr/bin/env bash
# Runs the fake-GPU suites (no GPU needed): fake_engine_test against the fake CUDA runtime,
# then fake_nccl_test against the fake CUDA runtime and the fake NCCL. Needs a CUDA build
# of libflowlane: BUILD (default build-gpu) configured with -DFLOWLANE_WITH_CUDA=ON (with
# NCCL found, for fake_nccl_test).
#   tests/gpu/fake/run.sh [gtest args]          # both suites, the args given to each
#   FAKE_SUITES=nccl tests/gpu/fake/run.sh      # one suite: engine or nccl
# Under ThreadSanitizer: BUILD=<a CUDA build with -DFLOWLANE_SANITIZE=thread> FAKE_FLAGS=-fsanitize=thread
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BUILD=${BUILD:-$root/build-gpu}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
FAKE_FLAGS=${FAKE_FLAGS:-}
FAKE_SUITES=${FAKE_SUITES:-engine nccl}
tmp=${TMPDIR:-/tmp}/flowlane-fake-gpu${FAKE_FLAGS:+-san}
mkdir -p "$tmp"
here="$root/tests/gpu/fake"
lib="$BUILD/capi/libflowlane.so"

g++ -std=c++20 -O1 -g $FAKE_FLAGS -shared -fPIC -Wall -I"$CUDA_INC" "$here/fake_cudart.cpp" -o "$tmp/libfakecudart.so" -lpthread

run() {  # run <binary> [args]: the fakes ahead of the real libraries
  if [ -n "$FAKE_FLAGS" ]; then
    # The sanitizer runtime must come first; the fakes are found through the rpath, and
    # libflowlane finds them in the global scope before it looks for libcudart/libnccl.
    "$@"
  else
    LD_PRELOAD="$tmp/libfakecudart.so${preload_extra:-}" "$@"
  fi
}

for suite in $FAKE_SUITES; do
  case $suite in
    engine)
      g++ -std=c++20 -O1 -g $FAKE_FLAGS -Wall -I"$CUDA_INC" -I"$root/capi/include" -I"$here" "$here/fake_engine_test.cpp" \
        -o "$tmp/fake_engine_test" -L"$BUILD/capi" -lflowlane -L"$tmp" -lfakecudart -lgtest -lgtest_main -lpthread \
        -Wl,-rpath,"$BUILD/capi" -Wl,-rpath,"$tmp"
      preload_extra="" run "$tmp/fake_engine_test" "$@"
      ;;
    nccl)
      # libflowlane loads NCCL at run time (gpu/runtime.hpp): a build with NCCL names its
      # functions as strings. A fake lacking one is refused at load, naming it.
      if ! grep -q ncclGroupStart "$lib"; then
        echo "run.sh: $lib was built without NCCL: skipping fake_nccl_test"
        continue
      fi
      g++ -std=c++20 -O1 -g $FAKE_FLAGS -shared -fPIC -Wall -Wextra -I"$CUDA_INC" -I"$here" "$here/fake_nccl.cpp" "$here/fake_nccl_xproc.cpp" \
        -o "$tmp/libfakenccl.so" -L"$tmp" -lfakecudart -lpthread -Wl,-rpath,"$tmp"
      g++ -std=c++20 -O1 -g $FAKE_FLAGS -Wall -Wextra -I"$CUDA_INC" -I"$root/capi/include" -I"$root/tests" -I"$here" \
        "$here/fake_nccl_test.cpp" -o "$tmp/fake_nccl_test" -L"$BUILD/capi" -lflowlane -L"$tmp" -lfakenccl -lfakecudart \
        -lgtest -lgtest_main -lpthread -Wl,-rpath,"$BUILD/capi" -Wl,-rpath,"$tmp"
      preload_extra=":$tmp/libfakenccl.so" run "$tmp/fake_nccl_test" "$@"
      ;;
    *)
      echo "run.sh: unknown suite '$suite' (engine, nccl)" >&2
      exit 2
      ;;
  esac
done
