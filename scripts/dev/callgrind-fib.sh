#!/usr/bin/env bash
# Instructions (callgrind Ir) per call of a fork-join fib from the program's main thread,
# one task group per call (as BM_FibMain* in bench/bench_capi_forkjoin.cpp), with the
# engine's one worker held in a host instruction's callback so that every task runs on the
# main thread: a deterministic count of the task-group path (create, spawn, wait, destroy,
# and running the task). Compiles a small driver against a libflowlane.so.0, counts
# fib(N1) and fib(N2) (collection on inside the driver's fib_root only) and divides the
# difference by the difference in calls that make a group (fib(N+1) - 1 for fib(N)).
#   scripts/dev/callgrind-fib.sh                  # $BUILD_DIR/capi, fib(18) and fib(20)
#   scripts/dev/callgrind-fib.sh /tmp/old/capi    # another build's library (alternate builds)
# Needs valgrind and a C++ compiler.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$FLOWLANE_ROOT"

LIB_DIR="${1:-$BUILD_DIR/capi}"
N1="${FL_FIB_N1:-18}"
N2="${FL_FIB_N2:-20}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat >"$work/fib.cpp" <<'CPP'
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include "flowlane/flowlane.h"
static void check(fl_status_t st, const char* what) {
  if (st == FL_OK) return;
  std::fprintf(stderr, "%s: %s: %s\n", what, fl_status_name(st), fl_last_error_message());
  std::exit(1);
}
struct Fib { fl_engine_t* engine; long n; long result; };
static fl_status_t fib_task(void* p) {
  auto* f = static_cast<Fib*>(p);
  if (f->n < 2) { f->result = f->n; return FL_OK; }
  Fib a{f->engine, f->n - 1, 0}, b{f->engine, f->n - 2, 0};
  fl_task_group_t* g;
  fl_status_t st = fl_task_group_create(f->engine, &g);
  if (st != FL_OK) return st;
  st = fl_task_group_spawn(g, &fib_task, &a, nullptr);
  if (st == FL_OK) st = fib_task(&b);
  fl_status_t w = fl_task_group_wait(g);
  fl_task_group_destroy(g);
  f->result = a.result + b.result;
  return st != FL_OK ? st : w;
}
static std::atomic<int> held{0}, released{0};
__attribute__((noinline)) long fib_root(fl_engine_t* e, long n) {
  Fib f{e, n, 0};
  check(fib_task(&f), "fib");
  return f.result;
}
int main(int argc, char** argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 20;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 1;
  fl_engine_t* e = nullptr;
  check(fl_engine_create(&d, &e), "fl_engine_create");
  fl_stream_t* s = nullptr;
  check(fl_stream_get(e, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s), "fl_stream_get");
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void*) -> fl_status_t {
    held.store(1);
    held.notify_all();
    released.wait(0);  // the worker sleeps here while the main thread runs fib
    return FL_OK;
  };
  check(fl_submit_host(s, &in, nullptr), "fl_submit_host");
  held.wait(0);
  long r = fib_root(e, n);
  released.store(1);
  released.notify_all();
  check(fl_stream_synchronize(s), "fl_stream_synchronize");
  check(fl_engine_destroy(e), "fl_engine_destroy");
  std::printf("fib(%ld) = %ld\n", n, r);
}
CPP
"${CXX:-c++}" -O2 -std=c++20 -I capi/include "$work/fib.cpp" -o "$work/fib" -L "$LIB_DIR" -l:libflowlane.so.0 -pthread
ir() {
  LD_LIBRARY_PATH="$LIB_DIR" valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1" --toggle-collect='*fib_root*' \
    "$work/fib" "$1" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
calls() { python3 -c "a,b=0,1
for _ in range($1 + 1): a,b=b,a+b
print(a - 1)"; }  # fib(N + 1) - 1: the calls of fib(N) that make a group
i1="$(ir "$N1")"
i2="$(ir "$N2")"
c1="$(calls "$N1")"
c2="$(calls "$N2")"
echo "library: $LIB_DIR"
echo "fib($N1): $i1 Ir, $c1 groups; fib($N2): $i2 Ir, $c2 groups"
python3 -c "print('Ir per fib call that makes a group: %.0f' % (($i2 - $i1) / ($c2 - $c1)))"
