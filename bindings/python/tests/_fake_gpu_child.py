"""Run by test_gpu_fake.py in a child interpreter whose LD_PRELOAD holds the fake CUDA
runtime (tests/gpu/fake/fake_cudart.cpp): a "kernel" is a fake::Kernel descriptor
{int nargs; size_t sizes[8]; int (*run)(const void* const* args)} passed as the function
address; the fake copies the argument bytes at launch and calls run on its stream thread
("device memory" is host memory). Exits non-zero if any check fails."""

import ctypes
import sys
import threading
import unittest

from _support import flowlane

RUN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))


class FakeKernel(ctypes.Structure):
    _fields_ = [("nargs", ctypes.c_int), ("sizes", ctypes.c_size_t * 8), ("run", RUN)]


def make_kernel(sizes, body):
    """body(args) gets the array of argument pointers; returns 0, or non-zero for a fault."""
    k = FakeKernel()
    k.nargs = len(sizes)
    for i, s in enumerate(sizes):
        k.sizes[i] = s
    k.run = RUN(body)
    return k


def _add(args):  # (int32* p, int32 v): *p += v
    p = ctypes.cast(args[0], ctypes.POINTER(ctypes.c_void_p))[0]
    v = ctypes.cast(args[1], ctypes.POINTER(ctypes.c_int32))[0]
    cell = ctypes.c_int32.from_address(p)
    cell.value += v
    return 0


ADD = make_kernel([ctypes.sizeof(ctypes.c_void_p), ctypes.sizeof(ctypes.c_int32)], _add)
FAULT = make_kernel([], lambda args: 1)
GPU = flowlane.Device.cuda(0)


def fake_fn(name):
    return getattr(ctypes.CDLL(None), name)


class FakeGpu(unittest.TestCase):
    def test_device_count_is_the_fakes(self):
        self.assertEqual(flowlane.cuda_device_count(), 1)

    def test_kernels_across_lanes_and_streams_add_up(self):
        total = ctypes.c_int32(0)
        with flowlane.Engine(workers=2, lanes=4) as e:
            o = e.object()
            streams = [e.stream(1, device=GPU), e.stream(2, device=GPU, kind=flowlane.StreamKind.H2D)]
            for k in range(600):
                streams[k % 2].submit_kernel(ctypes.addressof(ADD), args=[ctypes.c_void_p(ctypes.addressof(total)),
                                                                          ctypes.c_int32(k % 3)],
                                             reads=[o], writes=[o], name="add")
            o.wait()
            self.assertEqual(total.value, sum(k % 3 for k in range(600)))

    def test_device_function_gets_the_stream_and_runs_once(self):
        seen = []
        with flowlane.Engine(workers=2, lanes=2) as e:
            o = e.object()
            s = e.stream(1, device=GPU)
            s.submit_device(lambda cuda_stream: seen.append(cuda_stream), writes=[o], name="device-fn")
            o.wait()
            e.synchronize()
        self.assertEqual(len(seen), 1)
        self.assertNotEqual(seen[0], 0)

    def test_memset_then_d2h_then_host_instruction(self):
        dev = (ctypes.c_uint8 * 64)()
        host = (ctypes.c_uint8 * 64)()
        with flowlane.Engine(workers=2, lanes=2) as e:
            od, oh, total = e.object(), e.object(), e.object()
            e.stream(1, device=GPU).memset(ctypes.addressof(dev), 7, 64, writes=[od])
            e.stream(1, device=GPU, kind=flowlane.StreamKind.D2H).memcpy(
                ctypes.addressof(host), ctypes.addressof(dev), 64, flowlane.MemcpyKind.D2H, reads=[od], writes=[oh])
            with e.lane(1):
                e.submit(lambda _: sum(host), reads=[oh], writes=[total])
            self.assertEqual(total.wait(), 7 * 64)

    def test_priority_is_clamped_to_the_devices_range(self):
        least, greatest = flowlane.cuda_priority_range(0)
        self.assertEqual((least, greatest), (0, -5))  # the fake's range
        with flowlane.Engine(workers=1, lanes=2) as e:
            self.assertEqual(e.stream(1, device=GPU).set_priority(-100), -5)

    def test_launch_error_names_the_instruction_and_poisons_readers(self):
        x = ctypes.c_int32(0)
        with flowlane.Engine(workers=2, lanes=3) as e:
            o = e.object()
            e.stream(1, device=GPU).submit_kernel(
                ctypes.addressof(ADD), block=(2048, 1, 1), args=[ctypes.c_void_p(ctypes.addressof(x)),
                                                                  ctypes.c_int32(1)], writes=[o], name="too-big")
            e.stream(2, device=GPU).submit_kernel(
                ctypes.addressof(ADD), args=[ctypes.c_void_p(ctypes.addressof(x)), ctypes.c_int32(1)],
                reads=[o], name="reader")
            with self.assertRaises(flowlane.CudaError) as cm:
                e.synchronize()
            self.assertIn("too-big", str(cm.exception))
            self.assertIn("cudaErrorInvalidConfiguration", str(cm.exception))
            # The skipped reader is part of that failure, reported with it, once.
            self.assertIn("1 instruction that depended on it was skipped", str(cm.exception))
            e.synchronize()
        self.assertEqual(x.value, 0)

    def test_asynchronous_fault_fails_with_cuda_error(self):
        try:
            with flowlane.Engine(workers=2, lanes=2) as e:
                o = e.object()
                e.stream(1, device=GPU).submit_kernel(ctypes.addressof(FAULT), writes=[o], name="wild-write")
                with self.assertRaises(flowlane.CudaError) as cm:
                    o.wait()
                self.assertIn("wild-write", str(cm.exception))
                self.assertIn("cudaErrorIllegalAddress", str(cm.exception))
        finally:
            fake_fn("fake_cudart_reset_sticky")()

    def test_kernel_args_are_copied_at_submit(self):
        total = ctypes.c_int32(0)
        gate = threading.Event()
        with flowlane.Engine(workers=2, lanes=2) as e:
            o = e.object()
            with e.lane(1):
                e.submit(lambda: gate.wait(60), writes=[o], name="gate")
            v = ctypes.c_int32(5)
            e.stream(1, device=GPU).submit_kernel(ctypes.addressof(ADD), args=[
                ctypes.c_void_p(ctypes.addressof(total)), v], reads=[o], writes=[o])
            v.value = 1000  # after submit: the kernel must see 5
            gate.set()
            o.wait()
        self.assertEqual(total.value, 5)


if __name__ == "__main__":
    r = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if r.wasSuccessful() else 1)
