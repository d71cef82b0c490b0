"""The installable package: scripts/wheel.sh builds a platform-tagged wheel that bundles
libflowlane.so.0, leaving nothing behind in the source tree; in a fresh venv
`pip install --no-index` installs it, and `python -m flowlane` and a small program run with
no environment variable pointing at the library. Skipped (with the reason) where
python3-venv or python3-build/wheel/setuptools are missing."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import unittest
import zipfile

import _support

REPO = os.path.dirname(os.path.dirname(_support._PKG_ROOT))
WHEEL_SH = os.path.join(REPO, "scripts", "wheel.sh")


def _python_with(*modules):
    for py in (sys.executable, "/usr/bin/python3"):
        if py and os.path.exists(py) and subprocess.run(
                [py, "-c", "import %s" % ", ".join(modules)], capture_output=True).returncode == 0:
            return py
    return None


BUILD_PY = _python_with("build", "wheel", "setuptools")
VENV_PY = _python_with("venv", "ensurepip")
PLATFORM = sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _git_status():
    if not shutil.which("git") or not os.path.isdir(os.path.join(REPO, ".git")) and not os.path.isfile(
            os.path.join(REPO, ".git")):
        return None
    r = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=all"], capture_output=True,
                       text=True)
    return r.stdout if r.returncode == 0 else None


def _clean_env(home):
    """No FLOWLANE_*, PYTHONPATH or LD_LIBRARY_PATH: only what an installed package has."""
    return {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"}


@unittest.skipUnless(BUILD_PY, "needs python3-build, python3-wheel and python3-setuptools to build a wheel")
@unittest.skipUnless(VENV_PY, "needs python3-venv (venv with ensurepip) to install the wheel")
class InstalledWheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="flowlane-wheel-")
        status_before = _git_status()
        env = dict(os.environ, PYTHON=BUILD_PY)
        r = subprocess.run([WHEEL_SH, os.path.join(cls.tmp, "dist")], env=env, capture_output=True, text=True,
                           timeout=1200)
        if r.returncode != 0:
            raise AssertionError("scripts/wheel.sh failed:\n%s%s" % (r.stdout, r.stderr))
        cls.status_after = _git_status()
        cls.status_before = status_before
        cls.wheels = sorted(os.listdir(os.path.join(cls.tmp, "dist")))
        cls.venv = os.path.join(cls.tmp, "venv")
        subprocess.run([VENV_PY, "-m", "venv", cls.venv], check=True, timeout=300)
        cls.py = os.path.join(cls.venv, "bin", "python")
        r = subprocess.run([cls.py, "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
                            os.path.join(cls.tmp, "dist", cls.wheels[0])],
                           capture_output=True, text=True, timeout=300, env=_clean_env(cls.tmp))
        if r.returncode != 0:
            raise AssertionError("pip install --no-index failed:\n%s%s" % (r.stdout, r.stderr))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_in_venv(self, *args, env=None):
        return subprocess.run([self.py] + list(args), cwd=self.tmp, env=env or _clean_env(self.tmp),
                              capture_output=True, text=True, timeout=300)

    def test_the_wheel_is_platform_tagged_and_bundles_the_library(self):
        self.assertEqual(self.wheels, ["flowlane-0.1.0-py3-none-%s.whl" % PLATFORM])
        with zipfile.ZipFile(os.path.join(self.tmp, "dist", self.wheels[0])) as z:
            names = z.namelist()
            wheel_meta = z.read("flowlane-0.1.0.dist-info/WHEEL").decode()
        for required in ("flowlane/libflowlane.so.0", "flowlane/_capi.py", "flowlane/__main__.py",
                         "flowlane/py.typed"):
            self.assertIn(required, names)
        self.assertFalse([n for n in names if "tests/" in n or n.endswith(".pyc")], names)
        self.assertIn("Root-Is-Purelib: false", wheel_meta)

    def test_its_help_and_metadata_name_no_file_it_lacks(self):
        # help(flowlane) and the wheel's description (PKG-INFO: the README) are all a user of
        # the wheel has: every path they name must be in it.
        with zipfile.ZipFile(os.path.join(self.tmp, "dist", self.wheels[0])) as z:
            names = set(z.namelist())
            metadata = z.read("flowlane-0.1.0.dist-info/METADATA").decode()
        r = self.run_in_venv("-c", "import flowlane, pydoc; print(pydoc.render_doc(flowlane, renderer=pydoc.plaintext))")
        self.assertEqual(r.returncode, 0, r.stderr)
        # A path: ../x, a folder of the repository, or a file name with a source or text extension.
        path = re.compile(r"(?<![\w/.:])((?:\.\./|(?:bindings|scripts|tests|examples|docs|capi|core|bench)/)[\w./-]*"
                          r"|[\w.-][\w./-]*\.(?:md|sh|txt|toml|cfg|h|hpp|c|rs|py))(?![\w/])")
        for where, text in (("help(flowlane)", r.stdout), ("the wheel's METADATA", metadata)):
            text = re.sub(r"(?<![\w.])/\S*", " ", text)  # absolute paths (pydoc's FILE): not references
            for m in path.finditer(text):
                name = m.group(1).rstrip(".")
                inside = name in names or ("flowlane/" + name) in names
                self.assertTrue(inside, "%s names %r, which the wheel does not contain" % (where, name))

    def test_building_leaves_no_untracked_files(self):
        if self.status_before is None:
            self.skipTest("not a git checkout")
        self.assertEqual(self.status_after, self.status_before)

    def test_self_check_finds_the_bundled_library_without_environment(self):
        r = self.run_in_venv("-m", "flowlane")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("flowlane self-check: OK", r.stdout)
        site = os.path.join(self.venv, "lib")
        self.assertIn("library:  %s" % site, r.stdout)
        self.assertIn("libflowlane.so.0", r.stdout)

    def test_a_small_program_runs(self):
        prog = os.path.join(self.tmp, "prog.py")
        with open(prog, "w") as f:
            f.write(textwrap.dedent("""
                import flowlane
                with flowlane.Engine(workers=2) as engine:
                    total = engine.object(0)
                    for i in range(10):
                        engine.submit(lambda t, i=i: t + i, reads=[total], writes=[total])
                    print("total", total.wait(), flowlane.library_path)
            """))
        r = self.run_in_venv(prog)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("total 45 %s" % self.venv), r.stdout)

    def test_a_program_using_futures_with_timeouts_runs(self):
        prog = os.path.join(self.tmp, "futures_prog.py")
        with open(prog, "w") as f:
            f.write(textwrap.dedent("""
                import concurrent.futures, threading
                import flowlane
                with flowlane.Engine(workers=2) as engine:
                    gate = threading.Event()
                    slow = engine.submit(lambda: gate.wait(60) and "late", name="slow")
                    try:
                        slow.result(timeout=0.05)
                        print("no timeout")
                    except concurrent.futures.TimeoutError:
                        print("timed out")
                    gate.set()
                    fs = [engine.submit(lambda i=i: i * i) for i in range(5)]
                    done = sorted(f.result(timeout=60) for f in concurrent.futures.as_completed(fs, timeout=60))
                    print(slow.result(timeout=60), done)
            """))
        r = self.run_in_venv(prog)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "timed out\nlate [0, 1, 4, 9, 16]\n")

    def test_library_not_found_hint_makes_sense_outside_a_checkout(self):
        env = dict(_clean_env(self.tmp), FLOWLANE_LIBRARY="/nonexistent/libflowlane.so.0")
        r = self.run_in_venv("-c", "import flowlane", env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFound", r.stderr)
        self.assertIn("FLOWLANE_LIBRARY=/nonexistent/libflowlane.so.0 could not be loaded", r.stderr)
        self.assertNotIn("cmake --build build", r.stderr, "no build-tree advice outside a checkout")
        # The package without its bundled library (as a pure install would be).
        bare = os.path.join(self.tmp, "bare")
        shutil.copytree(os.path.join(self.venv, "lib"), bare,
                        ignore=shutil.ignore_patterns("libflowlane.so*", "__pycache__"))
        site = [os.path.join(d) for d, sub, _ in os.walk(bare) if "flowlane" in sub and d.endswith("site-packages")]
        self.assertEqual(len(site), 1, site)
        probe = self.run_in_venv("-c", "import ctypes.util; print(ctypes.util.find_library('flowlane'))")
        if probe.stdout.strip() != "None":
            self.skipTest("a system-wide libflowlane is installed (%s), so the bare package finds it"
                          % probe.stdout.strip())
        r = self.run_in_venv("-c", "import flowlane", env=dict(_clean_env(self.tmp), PYTHONPATH=site[0]))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("does not bundle the library", r.stderr)
        self.assertIn("scripts/wheel.sh", r.stderr)


if __name__ == "__main__":
    unittest.main()
