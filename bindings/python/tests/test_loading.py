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


def _shared_library(directory, compiler, source_name, lib_name, source):
    """Compiles ``source`` into ``directory/lib_name`` (a shared library); returns its path."""
    src = os.path.join(directory, source_name)
    lib = os.path.join(directory, lib_name)
    with open(src, "w") as f:
        f.write(textwrap.dedent(source))
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


class Loading(unittest.TestCase):
    def test_missing_library_is_a_clear_import_error(self):
        r = _run("/nonexistent/libflowlane.so.0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFound", r.stderr)
        self.assertIn("FLOWLANE_LIBRARY", r.stderr)

    @unittest.skipUnless(shutil.which("cc"), "needs a C compiler")
    def test_wrong_major_version_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            lib = _shared_library(d, "cc", "fake.c", "libflowlane.so.0", """
                unsigned fl_version_hex(void) { return (7u << 16) | (2u << 8) | 1u; }
            """)
            r = _run(lib)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("LibraryVersionMismatch", r.stderr)
            self.assertIn("7.2.1", r.stderr)
            self.assertIn("major version 0", r.stderr)

    @unittest.skipUnless(shutil.which("c++"), "needs a C++ compiler")
    def test_a_cxx_library_loaded_after_flowlane_keeps_one_allocator(self):
        # libflowlane, loaded first (RTLD_LOCAL, as ctypes does), must not leave libstdc++
        # and C++ libraries loaded later with different allocators. It once linked
        # libmimalloc, which exports operator new/delete, and `import flowlane; import
        # torch` crashed; it now uses the process's allocator.
        with tempfile.TemporaryDirectory() as d:
            lib = _shared_library(d, "c++", "cxx.cpp", "libcxx.so", """
                #include <string>
                #include <vector>
                extern "C" int cxx_strings(int n) {
                  std::vector<std::string> v;
                  for (int i = 0; i < n; ++i) v.push_back(std::string(100, 'a' + i % 26) + std::to_string(i));
                  std::string s;
                  for (auto& x : v) s += x;
                  return static_cast<int>(s.size());
                }
            """)
            code = ("import ctypes, flowlane\n"
                    "with flowlane.Engine(workers=2) as e:\n"
                    "    o = e.object('x' * 1000)\n"
                    "    e.submit(lambda v: v * 2, reads=[o], writes=[o], name='n' * 300)\n"
                    "    o.wait()\n"
                    "print(ctypes.CDLL(%r).cxx_strings(1000))\n" % lib)
            env = dict(os.environ, PYTHONPATH=PKG_ROOT)
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, "exit %d: %s" % (r.returncode, r.stderr))
            self.assertEqual(r.stdout.strip(), "102890")


if __name__ == "__main__":
    unittest.main()
