#!/usr/bin/env python3
"""Runs one hang of flowlane_mpi_scenarios under mpirun (one process per rank), then
flowlane-comm-analyze on the ranks' communicator dumps, and compares its report with
tests/mpi/expected/<kind>.txt (ctest: mpi.hang.*).

    run_mpi_hang.py --mpirun MPIRUN --np N --program P --analyzer A --work DIR --kind K
                    --exit N --expected FILE [--job-fails] [--env VAR=VALUE ...]

What varies from run to run is masked as tests/comm/run_dump_scenario.py masks it (ids,
pids, hosts, durations, which rank's trigger came first). mpirun runs with its own
--timeout and this script bounds it again: a hung rank fails the test.
"""
import argparse
import difflib
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "comm"))
from run_dump_scenario import mask  # noqa: E402


def fail(msg):
    sys.stderr.write("FAIL: %s\n" % msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--analyzer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--kind", required=True)
    ap.add_argument("--exit", type=int, required=True, help="the analyzer's expected exit status")
    ap.add_argument("--expected", required=True)
    ap.add_argument("--job-fails", action="store_true", help="mpirun must end the job with an error (a rank died)")
    ap.add_argument("--env", action="append", default=[])
    args = ap.parse_args()

    work = os.path.join(args.work, args.kind)
    shutil.rmtree(work, ignore_errors=True)
    dumps = os.path.join(work, "dumps")
    os.makedirs(dumps)
    env = dict(os.environ, FLOWLANE_COMM_DUMP_DIR=dumps, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for kv in args.env:
        k, v = kv.split("=", 1)
        env[k] = v
    cmd = [args.mpirun, "--oversubscribe", "--bind-to", "none", "--timeout", "60", "-np", str(args.np), args.program,
           "hang", args.kind]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - t0
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    print("mpirun ended with %d after %.1f s" % (p.returncode, took))
    if args.job_fails and p.returncode == 0:
        fail("mpirun succeeded, but a rank was killed")
    if not args.job_fails and p.returncode != 0:
        fail("mpirun ended with %d" % p.returncode)
    names = sorted(f for f in os.listdir(dumps) if f.startswith("flowlane-comm-rank") and f.endswith(".json"))
    print("dumps: %s" % ", ".join(names))
    a = subprocess.run([sys.executable, args.analyzer, dumps], capture_output=True, text=True, timeout=60)
    sys.stdout.write(a.stdout)
    sys.stdout.write(a.stderr)
    if a.returncode != args.exit:
        fail("the analyzer exited with %d, expected %d" % (a.returncode, args.exit))
    with open(args.expected) as f:
        want = mask(f.read())
    got = mask(a.stdout)
    if got != want:
        sys.stdout.write("".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "expected", "got")))
        fail("the analyzer's report differs from %s" % args.expected)
    print("OK: %s, analyzer exit %d" % (args.kind, a.returncode))


if __name__ == "__main__":
    main()
