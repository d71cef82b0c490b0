"""setuptools hook of the flowlane Python package (metadata lives in pyproject.toml).

A wheel that bundles libflowlane.so.0 (scripts/wheel.sh copies it into flowlane/ of a
temporary copy of this directory) holds machine code for this platform, so it must not
claim to be pure: it is tagged ``py3-none-<platform>`` (any Python 3, no Python ABI
dependence since the package uses only ctypes, this OS/CPU) and installed as platlib.
Without a bundled library (a plain ``pip install bindings/python``) the package is pure
Python and the wheel stays ``py3-none-any``.
"""

import sysconfig
from pathlib import Path

from setuptools import Distribution, setup

HERE = Path(__file__).resolve().parent
options = {}

if any((HERE / "flowlane").glob("libflowlane.so*")):
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

    class BinaryDistribution(Distribution):
        """Holds machine code (the bundled library): installed as platlib, not pure."""

        def has_ext_modules(self) -> bool:
            return True

    class bdist_wheel(_bdist_wheel):  # noqa: N801 - the command's name
        """Tags the wheel py3-none-<platform>: no extension module, so no Python ABI."""

        def get_tag(self):  # type: ignore[no-untyped-def]
            return "py3", "none", sysconfig.get_platform().replace("-", "_").replace(".", "_")

    options = {"distclass": BinaryDistribution, "cmdclass": {"bdist_wheel": bdist_wheel}}

setup(**options)
