#!/usr/bin/env bash
# The GPU-host scripts' own logic, without a GPU (ctest gpu.scripts):
#  1. gpu-session.sh runs its later steps on the build tree the check names on its
#     "== build tree:" line, whatever the check said before it (it used to take the word
#     after "== prebuilt tree" of the check's refusal lines, "was" or "does", for the tree);
#  2. gpu-prebuild.sh packs a build in a git worktree, where .git is a file (it used to write
#     .git/info/exclude and fail there), the tarball holds every binary the session runs, and
#     git ignores it in a checkout whose .gitignore does not name it (the exclude file found
#     through `git rev-parse --git-path info/exclude`);
#  3. gpu_ab.py and gpu_report.py --require fail when a row is missing.
#   tests/gpu/scripts_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check WHAT COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}

# --- 1. the session's build tree ----------------------------------------------------------------
tree="$tmp/tree"
mkdir -p "$tree/bench"
for b in gpu_bench_gpu gpu_memops_probe; do
  printf '#!/bin/sh\necho "%s ran from $0" >> "%s/ran"\necho "%s stand-in"\n' "$b" "$tmp" "$b" > "$tree/bench/$b"
  chmod +x "$tree/bench/$b"
done
cat > "$tmp/check.sh" <<EOF
#!/usr/bin/env bash
# A stand-in for gpu-check.sh: what it prints when it refuses a tarball and builds instead.
{
  echo "== prebuilt tree was built from other sources than this checkout's (source 0123): building from source"
  echo "== the prebuilt binaries do not start here (x): building from source"
  echo "== build tree: $tree"
  echo "== FAILED: no-device (nvidia-smi lists no GPU)"
} > "\$OUT/summary.txt"
exit 1
EOF
out="$tmp/out"
mkdir -p "$out"
(cd "$src" && OUT="$out" FLOWLANE_GPU_CHECK_SCRIPT="$tmp/check.sh" FLOWLANE_GPU_SESSION_S=60 \
  bash scripts/dev/gpu-session.sh > "$tmp/session.log" 2>&1) || true
check "the session found the check's build tree" grep -q "gpu_memops_probe ran from $tree/bench/gpu_memops_probe" "$tmp/ran"
check "the session did not give up on the tree" bash -c "! grep -q 'no build tree' '$out/summary.txt'"
check "the session wrote its files" test -s "$out/memops.txt" -a -s "$out/session.tar.gz" -a -s "$out/report.md"

# --- 2. the prebuilt tarball, from a git worktree -------------------------------------------------
repo="$tmp/repo"
mkdir -p "$repo"
cp -r "$src/scripts" "$repo/"
(cd "$repo" && git init -q && git add scripts && git -c user.name=t -c user.email=t@t commit -qm init &&
  git worktree add -q "$tmp/wt" 2>/dev/null)
check "the test's worktree has a .git file" test -f "$tmp/wt/.git"
pb="$tmp/pb"
mkdir -p "$pb/capi" "$pb/tests" "$pb/bench" "$pb/examples"
for b in tests/flowlane_gpu_tests bench/gpu_bench_gpu bench/gpu_bench_gpu_controls bench/gpu_memops_probe \
         examples/parallel_compile capi/libflowlane.so.0; do
  printf '#!/bin/sh\n' > "$pb/$b"
  chmod +x "$pb/$b"
done
check "gpu-prebuild.sh packs a build from a worktree" bash -c "cd '$tmp/wt' && FLOWLANE_GPU_PREBUILD_SKIP_BUILD=1 \
  FLOWLANE_GPU_PREBUILD_DIR='$pb' FLOWLANE_GPU_PREBUILD_OUT='$tmp/pbout' bash scripts/dev/gpu-prebuild.sh > '$tmp/pb.log' 2>&1"
for b in tests/flowlane_gpu_tests bench/gpu_bench_gpu bench/gpu_bench_gpu_controls bench/gpu_memops_probe; do
  check "the tarball holds $b" bash -c "tar -tzf '$tmp/pbout/flgpu-build.tar.gz' | grep -q '$b\$'"
done
check "a tarball in the worktree is ignored by git there (no .gitignore: git's exclude file)" bash -c "cd '$tmp/wt' &&
  FLOWLANE_GPU_PREBUILD_SKIP_BUILD=1 FLOWLANE_GPU_PREBUILD_DIR='$pb' bash scripts/dev/gpu-prebuild.sh > '$tmp/pb2.log' 2>&1 &&
  test -s .gpuprebuilt/flgpu-build.tar.gz && git check-ignore -q .gpuprebuilt/flgpu-build.tar.gz &&
  test -z \"\$(git status --porcelain)\""
check "the tarball records the source hash" bash -c "tar -xzOf '$tmp/pbout/flgpu-build.tar.gz' '${pb#/}/prebuilt-commit' | grep -q '^source '"

# --- 3. reports fail on missing rows ----------------------------------------------------------------
mkdir -p "$tmp/ab"
python3 - "$tmp/ab" <<'EOF'
import json, sys
d = sys.argv[1]
runs = [{"name": n + "/real_time", "run_name": n + "/real_time", "run_type": "iteration", "items_per_second": 2e5}
        for n in ("BM_RawSingleStreamChain", "BM_FlowlaneSingleStreamChain")]  # the other rows are missing
json.dump({"context": {}, "benchmarks": runs}, open(f"{d}/r1__new__gpu_bench_gpu.json", "w"))
json.dump({"context": {}, "benchmarks": runs}, open(f"{d}/gpu_bench_gpu.json", "w"))
EOF
check "gpu_ab.py fails when a row is missing" bash -c "! python3 '$src/scripts/dev/gpu_ab.py' '$tmp/ab' > /dev/null 2>&1"
check "gpu_report.py --require fails when a row is missing" bash -c "! python3 '$src/scripts/dev/gpu_report.py' --require '$tmp/ab' > /dev/null 2>&1"
check "gpu_report.py without --require reports it" bash -c "python3 '$src/scripts/dev/gpu_report.py' '$tmp/ab' | grep -q '^Missing: '"

((fails == 0)) || { echo "$fails check(s) failed"; cat "$tmp/session.log" "$tmp/pb.log" 2>/dev/null | tail -20; exit 1; }
echo "all script checks passed"
