"""Data-parallel training across processes from Python: flowlane over MPI, with mpi4py.

    mpirun -np 4 python3 examples/python/mpi_dp.py
    python3 examples/python/mpi_dp.py          (one rank: MPI starts as a singleton)

The same training as examples/mpi/dp_train.c, smaller: every rank holds a replica of an
L-layer model and a shard of each batch; backward passes run on lane 0, and as soon as one
has written its layer's gradient, an all-reduce of it (flowlane.mpi, on lane 1) sums it
over the ranks while the next backward computes; the optimizer step (lane 2) applies it.
The arithmetic stays on small whole numbers (each result modulo a small prime), so that
sums are exact in any order: at the end every rank compares its weights, bit for bit, with
a sequential model of the whole batch. Standard library only (ctypes float buffers).
"""

import ctypes
import math
import sys

from mpi4py import MPI  # MPI_Init_thread(MPI_THREAD_MULTIPLE) on import

import flowlane
import flowlane.mpi

L, H, B, STEPS = 3, 16, 4, 6


def inputs(rank, step):
    return [[float((rank * 31 + step * 7 + b * 3 + i) % 9 - 4) for i in range(H)] for b in range(B)]


def target(rank, b, i):
    return float((rank + b + 2 * i) % 5 - 2)


def forward(w, x):
    return [[math.fmod(sum(w[i * H + j] * xb[j] for j in range(H)), 13) for i in range(H)] for xb in x]


def backward(w, x, dout):
    g = [0.0] * (H * H)
    for b in range(B):
        for i in range(H):
            for j in range(H):
                g[i * H + j] += dout[b][i] * x[b][j]
    g = [math.fmod(v, 7) for v in g]
    din = [[math.fmod(sum(w[i * H + j] * dout[b][i] for i in range(H)), 13) for j in range(H)] for b in range(B)]
    return g, din


def update(w, gsum):
    for k in range(H * H):
        w[k] = math.fmod(w[k] - math.fmod(gsum[k], 5), 11)


def initial():
    return [[float((l * 5 + i * 3) % 7 - 3) for i in range(H * H)] for l in range(L)]


def loss_grad(rank, out):
    return [[math.fmod(out[b][i] - target(rank, b, i), 13) for i in range(H)] for b in range(B)]


def main():
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    weights = initial()
    grads = [(ctypes.c_float * (H * H))() for _ in range(L)]  # what the all-reduces sum in place
    with flowlane.Engine(workers=2, lanes=4) as engine:
        comm = flowlane.mpi.comm_create(engine, world, lane=1)
        W = [engine.object() for _ in range(L)]
        G = [engine.object() for _ in range(L)]
        acts = [engine.object() for _ in range(L + 1)]  # this step's activations (Python lists)
        delta = [engine.object() for _ in range(L + 1)]
        for step in range(STEPS):
            engine.submit(lambda s=step: inputs(rank, s), writes=[acts[0]], name="input")
            for l in range(L):
                engine.submit(lambda x, _w, l=l: forward(weights[l], x), reads=[acts[l], W[l]], writes=[acts[l + 1]],
                              name="forward")
            engine.submit(lambda out: loss_grad(rank, out), reads=[acts[L]], writes=[delta[L]], name="loss")
            for l in reversed(range(L)):
                def back(x, d, _w, l=l):
                    g, din = backward(weights[l], x, d)
                    for k in range(H * H):
                        grads[l][k] = g[k]
                    return din, None  # delta[l]'s value; G[l] orders the ctypes buffer grads[l]
                engine.submit(back, reads=[acts[l], delta[l + 1], W[l]], writes=[delta[l], G[l]], name="backward")
                comm.all_reduce(ctypes.addressof(grads[l]), ctypes.addressof(grads[l]), H * H, flowlane.DType.FLOAT32,
                                reads=[G[l]], writes=[G[l]], name="grad.allreduce")
                engine.stream(2).submit(lambda _g, _w, l=l: update(weights[l], list(grads[l])), reads=[G[l], W[l]],
                                        writes=[W[l]], name="optimizer.step")
        engine.synchronize(timeout=120)
        comm.close()

    reference = initial()
    for step in range(STEPS):
        gsum = [[0.0] * (H * H) for _ in range(L)]
        for r in range(size):
            act = [inputs(r, step)]
            for l in range(L):
                act.append(forward(reference[l], act[l]))
            d = loss_grad(r, act[L])
            for l in reversed(range(L)):
                g, d = backward(reference[l], act[l], d)
                for k in range(H * H):
                    gsum[l][k] += g[k]
        for l in range(L):
            update(reference[l], [float(ctypes.c_float(v).value) for v in gsum[l]])
    same = all(ctypes.c_float(a).value == ctypes.c_float(b).value for wl, rl in zip(weights, reference)
               for a, b in zip(wl, rl))
    everyone = world.allreduce(1 if same else 0, op=MPI.MIN)
    if rank == 0:
        print("mpi_dp: %s: %d ranks, %d layers of %dx%d, %d steps: weights %s the sequential model bit for bit on "
              "every rank" % ("ok" if everyone else "FAILED", size, L, H, H, STEPS,
                              "match" if everyone else "DIFFER FROM"))
    return 0 if everyone else 1


if __name__ == "__main__":
    sys.exit(main())
