"""Library loading: a clear error for a missing library or a wrong major version."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import _support  # noqa: F401  (puts the package on sys.path)

PKG_ROOT = _support._PKG_ROOT


def _run(env_lib):
    env = dict(os.environ, FLOWLANE_LIBRARY=env_lib, PYTHONPATH=PKG_ROOT)
    return subprocess.run([sys.executable, "-c", "import flowlane"], env=env, capture_output=True, text=True,
                          timeout=60)


class Loading(unittest.TestCase):
    def test_missing_library_is_a_clear_import_error(self):
        r = _run("/nonexistent/libflowlane.so.0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFound", r.stderr)
        self.assertIn("FLOWLANE_LIBRARY", r.stderr)

    @unittest.skipUnless(shutil.which("cc"), "needs a C compiler")
    def test_wrong_major_version_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "fake.c")
            lib = os.path.join(d, "libflowlane.so.0")
            with open(src, "w") as f:
                f.write(textwrap.dedent("""
                    unsigned fl_version_hex(void) { return (7u << 16) | (2u << 8) | 1u; }
                """))
            subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True)
            r = _run(lib)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("LibraryVersionMismatch", r.stderr)
            self.assertIn("7.2.1", r.stderr)
            self.assertIn("major version 0", r.stderr)


if __name__ == "__main__":
    unittest.main()
