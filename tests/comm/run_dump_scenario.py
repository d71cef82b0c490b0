#!/usr/bin/env python3
"""Runs one scenario of flowlane_comm_dump_scenarios, then the analyzer on its dumps, and
compares the analyzer's report with tests/comm/expected/<scenario>.txt (ctest: comm.dump.*).

    run_dump_scenario.py --program P --analyzer A --work DIR --scenario S --exit N
                         [--expected FILE] [--signal TERM --returncode R] [--max-bytes B]

What varies from run to run is masked on both sides before comparing: each dump's trigger
and detail (which rank's timeout fired first and asked the others), hexadecimal ids and handles (0x...),
process ids, host names and durations in milliseconds. Every step is
bounded in time (a hang fails the test); a difference prints both reports and a diff.
"""
import argparse
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

MASKS = [
    # Which rank's timeout fired first, and so which ranks dumped on its request, varies.
    (re.compile(r"^(  rank \d+: .*?; )(comm_timeout|dump_request): .*$", re.M), r"\1<timeout or request>: <detail>"),
    (re.compile(r"^(  rank \d+: .*?; [a-z_]+): .*$", re.M), r"\1: <detail>"),
    (re.compile(r"0x[0-9a-f]{16}"), "0x<id>"),
    (re.compile(r"pid\d+"), "pid<N>"),
    (re.compile(r"pid \d+"), "pid <N>"),
    (re.compile(r"host [^,;)]+"), "host <H>"),
    (re.compile(r"\d+ ms\b"), "<T> ms"),
]


def mask(text):
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return text


def fail(msg):
    sys.stderr.write("FAIL: %s\n" % msg)
    sys.exit(1)


def run_program(args, out):
    cmd = [args.program, args.scenario, out] + args.extra
    if not args.signal:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        if p.returncode != 0:
            fail("%s exited with %d" % (" ".join(cmd), p.returncode))
        return
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()  # bounded by the program's own 60 s limit
        if line.strip() != "READY":
            fail("the program said %r instead of READY" % line)
        t0 = time.monotonic()
        p.send_signal(getattr(signal, "SIG" + args.signal))
        rc = p.wait(timeout=60)
        print("latency_ms signal-to-exit %.1f" % ((time.monotonic() - t0) * 1000))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if rc != args.returncode:
        fail("the program ended with %d, expected %d" % (rc, args.returncode))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", required=True)
    ap.add_argument("--analyzer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--extra", nargs="*", default=[])
    ap.add_argument("--exit", type=int, required=True, help="the analyzer's expected exit status")
    ap.add_argument("--expected", help="the analyzer's expected report")
    ap.add_argument("--signal")
    ap.add_argument("--returncode", type=int, default=0)
    ap.add_argument("--max-bytes", type=int, help="every dump file stays under this size")
    args = ap.parse_args()
    out = os.path.join(args.work, args.scenario + "".join("-" + e for e in args.extra))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    run_program(args, out)
    if args.max_bytes:
        for name in os.listdir(out):
            size = os.path.getsize(os.path.join(out, name))
            if name.endswith(".json") and size > args.max_bytes:
                fail("%s is %d bytes, over the bound of %d" % (name, size, args.max_bytes))
    job = os.path.join(out, "job")  # the dumps a scenario froze once they showed the hang
    p = subprocess.run([sys.executable, args.analyzer, job if os.path.isdir(job) else out], capture_output=True,
                       text=True, timeout=120)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if p.returncode != args.exit:
        fail("the analyzer exited with %d, expected %d" % (p.returncode, args.exit))
    if args.expected:
        with open(args.expected) as f:
            want = mask(f.read())
        got = mask(p.stdout)
        if got != want:
            sys.stdout.write("".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                          "expected", "got")))
            fail("the analyzer's report differs from %s" % args.expected)
    print("PASS: %s: analyzer exit %d%s" % (args.scenario, p.returncode, ", report as expected" if args.expected else ""))


if __name__ == "__main__":
    main()
