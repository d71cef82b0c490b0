#!/usr/bin/env bash
# The main demo, from a fresh Debian machine: installs missing packages, builds flowlane
# (Release, in build/), prints the engine's facts (examples/engine_info), then runs the
# pipeline-parallel demo (examples/pipeline): GPipe and 1F1B schedules over lanes, their
# executed order checked, the bubble measured against (n-1)/(m+n-1), Perfetto traces
# written to the current directory. Arguments go to the pipeline demo
# (e.g. --stages 4 --micro 16 --schedule 1f1b; --help lists them).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FLOWLANE_ROOT"

run_setup
say "configure ($BUILD_DIR, Release)"
configure_release -DFLOWLANE_BUILD_EXAMPLES=ON
say "build the demos"
cmake --build "$BUILD_DIR" -j "$JOBS" --target engine_info pipeline
say "run $BUILD_DIR/examples/engine_info"
"$BUILD_DIR/examples/engine_info"
say "run $BUILD_DIR/examples/pipeline $*"
"$BUILD_DIR/examples/pipeline" "$@"
