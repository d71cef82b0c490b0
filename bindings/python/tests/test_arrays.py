"""NumPy arrays and PyTorch CPU tensors as objects' values (each part skipped, with the
reason, where the library is not installed)."""

import importlib.util
import threading
import unittest

from _support import flowlane, raises_failure

HAVE_NUMPY = importlib.util.find_spec("numpy") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None


@unittest.skipUnless(HAVE_NUMPY, "NumPy is not installed (Debian: python3-numpy)")
class NumpyValues(unittest.TestCase):
    def test_arrays_flow_between_lanes_and_mutate_in_place(self):
        import numpy as np

        with flowlane.Engine(workers=2, lanes=3) as e:
            a = e.object(np.arange(6, dtype=np.float64).reshape(2, 3))
            b = e.object()

            def scale(x):
                x *= 2.0  # in place: the object keeps the same array
                return flowlane.KEEP

            e.submit(scale, reads=[a], writes=[a], lane=1, name="scale")
            total = e.submit(lambda x: x.sum(axis=0), reads=[a], writes=[b], lane=2, name="sum")
            np.testing.assert_array_equal(b.wait(), [6.0, 10.0, 14.0])
            self.assertIs(total.result(timeout=60), b.value)  # the future's result is the array written
            np.testing.assert_array_equal(a.value, np.arange(6).reshape(2, 3) * 2.0)

    def test_numpy_errors_keep_their_type(self):
        import numpy as np

        with flowlane.Engine(workers=1) as e:
            out = e.object()
            e.submit(lambda: np.ones((2, 3)) @ np.ones((2, 3)), writes=[out], name="bad matmul")
            with raises_failure(ValueError) as f:
                out.wait()
            self.assertIn("'bad matmul'", str(f.context))

    def test_parallel_for_fills_disjoint_slices(self):
        import numpy as np

        data = np.zeros(100_000)
        with flowlane.Engine(workers=2) as e:
            def body(lo, hi):
                data[lo:hi] = np.sqrt(np.arange(lo, hi, dtype=np.float64))
            e.parallel_for(0, len(data), body, grain=4096)
        np.testing.assert_allclose(data, np.sqrt(np.arange(len(data))))


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not installed (Debian: python3-torch)")
class TorchCpuTensors(unittest.TestCase):
    def test_tensor_work_on_lanes(self):
        import torch

        torch.manual_seed(0)
        x = torch.randn(64, 32)
        w1, w2 = torch.randn(32, 48), torch.randn(48, 16)
        seen_threads = set()
        lock = threading.Lock()

        def on_worker(fn):
            def run(*args):
                with lock:
                    seen_threads.add(threading.get_ident())
                return fn(*args)
            return run

        with flowlane.Engine(workers=2, lanes=4) as e:
            xs, h, y, norm = e.object(x), e.object(), e.object(), e.object()
            e.submit(on_worker(lambda a, b: torch.relu(a @ b)), reads=[xs, e.object(w1)], writes=[h], lane=1,
                     name="layer1")
            e.submit(on_worker(lambda a: a @ w2), reads=[h], writes=[y], lane=2, name="layer2")
            f = e.submit(on_worker(lambda a: float(a.norm())), reads=[y], writes=[norm], lane=3, name="norm")
            expected = torch.relu(x @ w1) @ w2
            self.assertTrue(torch.allclose(y.wait(timeout=60), expected))
            self.assertAlmostEqual(norm.wait(), float(expected.norm()), places=3)
            self.assertEqual(f.result(timeout=60), norm.value)  # the future's result is the value written
        self.assertNotIn(threading.get_ident(), seen_threads, "the callables ran on the engine's workers")

    def test_torch_errors_keep_their_type(self):
        import torch

        with flowlane.Engine(workers=1) as e:
            out = e.object()
            e.submit(lambda: torch.ones(2, 3) @ torch.ones(2, 3), writes=[out], name="shape mismatch")
            with raises_failure(RuntimeError) as f:
                out.wait()
            self.assertIn("'shape mismatch'", str(f.context))
            self.assertIn("mat", str(f.original))


if __name__ == "__main__":
    unittest.main()
