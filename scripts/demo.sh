#!/usr/bin/env bash
# The main demo, from a fresh Debian machine: installs missing packages, builds flowlane
# (Release, in build/) and runs examples/engine_info. Arguments go to the demo
# (e.g. --workers 4 --lanes 16).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FLOWLANE_ROOT"

run_setup
say "configure ($BUILD_DIR, Release)"
configure_release -DFLOWLANE_BUILD_EXAMPLES=ON
say "build the demo"
cmake --build "$BUILD_DIR" -j "$JOBS" --target engine_info
say "run $BUILD_DIR/examples/engine_info $*"
"$BUILD_DIR/examples/engine_info" "$@"
