#!/usr/bin/env python3
"""Starts N plain processes of flowlane_fake_nccl_procs as a launcher would (no MPI), each
with the launcher's variables for its rank, and checks how each one ends (ctest:
fakegpu.procs.*).

    run_procs.py --program P --np N --launcher torchrun|ompi|slurm --mode MODE [--die RANK]
                 [--seconds S]

Every run gets a fresh temporary folder: the file rendezvous's (DIR) and the fake NCCL's
shared folder (FAKE_NCCL_SHARED_DIR) are in it, and it is removed afterwards. Every rank
must exit 0, except the one --die names, which must die of SIGKILL. The whole run is
bounded by --seconds: a rank still running then is killed and the run fails.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK",
                 "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                 "SLURM_NTASKS_PER_NODE")


def rank_env(launcher, rank, n):
    """The variables `launcher` sets for `rank` of `n`, all on one node."""
    if launcher == "torchrun":
        return {"RANK": rank, "WORLD_SIZE": n, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": n}
    if launcher == "ompi":
        return {"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": n, "OMPI_COMM_WORLD_LOCAL_RANK": rank,
                "OMPI_COMM_WORLD_LOCAL_SIZE": n}
    if launcher == "slurm":
        return {"SLURM_PROCID": rank, "SLURM_NTASKS": n, "SLURM_LOCALID": rank, "SLURM_NTASKS_PER_NODE": n}
    raise SystemExit("unknown launcher %s" % launcher)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--launcher", default="torchrun", choices=("torchrun", "ompi", "slurm"))
    ap.add_argument("--mode", required=True, choices=("ops", "die", "stall", "mismatch", "dup"))
    ap.add_argument("--die", type=int, default=None, help="the rank that dies (mode die)")
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    if (a.mode == "die") != (a.die is not None):
        raise SystemExit("--die RANK goes with --mode die, and only with it")

    work = tempfile.mkdtemp(prefix="flowlane-procs-")
    shared = os.path.join(work, "nccl")
    os.mkdir(shared)
    procs = []
    try:
        for r in range(a.np):
            env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
            env.update({k: str(v) for k, v in rank_env(a.launcher, r, a.np).items()})
            env["FAKE_NCCL_SHARED_DIR"] = shared  # (read by the fake NCCL only)
            env.setdefault("FLOWLANE_NCCL_INIT_TIMEOUT_MS", "5000")
            args = [a.program, a.mode, work] + ([str(a.die)] if a.die is not None else [])
            procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + a.seconds
        for r, p in enumerate(procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        hung = [r for r, p in enumerate(procs) if p.poll() is None]
        for r in hung:
            procs[r].kill()
        bad = []
        for r, p in enumerate(procs):
            out = p.communicate()[0].decode(errors="replace")
            sys.stdout.write("".join("[rank %d] %s\n" % (r, line) for line in out.splitlines()))
            want = -signal.SIGKILL if r == a.die else 0
            if r in hung:
                bad.append("rank %d still ran after %g s (killed)" % (r, a.seconds))
            elif p.returncode != want:
                bad.append("rank %d exited %d, want %d" % (r, p.returncode, want))
        if bad:
            sys.stderr.write("FAIL: %s\n" % "; ".join(bad))
            return 1
        print("PASS: %d processes (%s), mode %s" % (a.np, a.launcher, a.mode))
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
