"""Runs every example of examples/python/ as a user would (a fresh interpreter with the
package on PYTHONPATH) and checks its verdict line. Examples that need NumPy are skipped
where it is missing."""

import glob
import importlib.util
import os
import subprocess
import sys
import unittest

import _support

REPO = os.path.dirname(os.path.dirname(_support._PKG_ROOT))
EXAMPLES = sorted(glob.glob(os.path.join(REPO, "examples", "python", "*.py")))
HAVE_NUMPY = importlib.util.find_spec("numpy") is not None


class Examples(unittest.TestCase):
    def test_there_are_examples(self):
        names = [os.path.basename(p) for p in EXAMPLES]
        self.assertIn("quickstart.py", names)
        self.assertIn("numpy_pipeline.py", names)
        self.assertIn("futures.py", names)

    def run_example(self, path):
        with open(path) as f:
            if "import numpy" in f.read() and not HAVE_NUMPY:
                self.skipTest("%s needs NumPy (python3-numpy)" % os.path.basename(path))
        env = dict(os.environ, PYTHONPATH=_support._PKG_ROOT)
        r = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True, timeout=600)
        name = os.path.splitext(os.path.basename(path))[0]
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("%s: ok" % name, r.stdout)
        self.assertNotIn("never retrieved", r.stderr)

    def test_readme_first_program_is_the_c_example(self):
        # examples/first_program/main.c is built and run by ctest (example.first_program).
        import re

        with open(os.path.join(REPO, "README.md")) as f:
            block = re.search(r"## A first program.*?```c\n(.*?)```", f.read(), re.S)
        self.assertIsNotNone(block)
        with open(os.path.join(REPO, "examples", "first_program", "main.c")) as f:
            self.assertEqual(f.read(), block.group(1), "README's first program and examples/first_program differ")

    def test_quickstart(self):
        self.run_example(os.path.join(REPO, "examples", "python", "quickstart.py"))

    def test_futures(self):
        self.run_example(os.path.join(REPO, "examples", "python", "futures.py"))

    def test_every_example_has_its_test(self):
        tested = {name[len("test_"):] for name in dir(self) if name.startswith("test_")}
        for path in EXAMPLES:
            self.assertIn(os.path.splitext(os.path.basename(path))[0], tested)

    def test_mpi_dp(self):
        # One rank (MPI's singleton start); ctest example.mpi_dp_py runs it under mpirun -np 4.
        if importlib.util.find_spec("mpi4py") is None:
            self.skipTest("mpi_dp.py needs mpi4py (python3-mpi4py)")
        try:
            import flowlane.mpi
            flowlane.mpi.library_path()
        except ImportError as e:
            self.skipTest("mpi_dp.py needs libflowlane_mpi.so: %s" % e)
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")  # singleton start as root (CI)
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        self.run_example(os.path.join(REPO, "examples", "python", "mpi_dp.py"))

    def test_numpy_pipeline(self):
        self.run_example(os.path.join(REPO, "examples", "python", "numpy_pipeline.py"))


if __name__ == "__main__":
    unittest.main()
