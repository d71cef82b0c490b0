"""The Python GPU wrappers against the fake CUDA runtime of tests/gpu/fake (a CUDA build of
libflowlane, no GPU needed): kernels with argument bytes, device functions, memset/memcpy,
priorities, launch errors and asynchronous faults. The fake must be loaded ahead of
libcudart before libflowlane is, so the checks run in a child interpreter started with
LD_PRELOAD (_fake_gpu_child.py). Skipped where the fake was not built (CPU-only builds).

The fake is found through FLOWLANE_FAKE_CUDART, or next to the library under test:
<build>/tests/libflowlane_fake_cudart.so for FLOWLANE_LIBRARY=<build>/capi/libflowlane.so.0."""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def fake_library():
    path = os.environ.get("FLOWLANE_FAKE_CUDART")
    if path:
        return path if os.path.exists(path) else None
    lib = os.environ.get("FLOWLANE_LIBRARY")
    if not lib:
        return None
    guess = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib))), "tests",
                         "libflowlane_fake_cudart.so")
    return guess if os.path.exists(guess) else None


class GpuWrappersAgainstTheFakeRuntime(unittest.TestCase):
    def test_child_suite(self):
        fake = fake_library()
        if fake is None:
            self.skipTest("no fake CUDA runtime next to the library (CPU-only build?)")
        env = dict(os.environ)
        env["LD_PRELOAD"] = fake + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env["FLOWLANE_FAKE_CUDART"] = fake
        if env.get("FLOWLANE_LIBRARY"):  # the child runs in this folder
            env["FLOWLANE_LIBRARY"] = os.path.abspath(env["FLOWLANE_LIBRARY"])
        r = subprocess.run([sys.executable, os.path.join(HERE, "_fake_gpu_child.py")], env=env, cwd=HERE,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, "the child suite failed:\n" + out)
        self.assertIn("OK", out)


if __name__ == "__main__":
    unittest.main()
