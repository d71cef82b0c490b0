"""The generated declarations (flowlane/_capi.py, scripts/dev/gen_bindings.py): layouts equal
the C compiler's, the status table equals the library's, the checked-in module equals what
the header generates, --check catches a stale file, and the generator copes with C99
declarations the header does not use yet."""

import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import _support  # noqa: F401  (puts the package on sys.path)
from flowlane import _capi, _ffi, errors

REPO = os.path.dirname(os.path.dirname(_support._PKG_ROOT))
HEADER = os.path.join(REPO, "capi", "include", "flowlane", "flowlane.h")
GEN = os.path.join(REPO, "scripts", "dev", "gen_bindings.py")
CC = shutil.which("cc") or shutil.which("gcc")


def _python_with_pycparser():
    for py in (sys.executable, "/usr/bin/python3"):
        if py and os.path.exists(py) and subprocess.run([py, "-c", "import pycparser"],
                                                         capture_output=True).returncode == 0:
            return py
    return None


PYCPARSER = _python_with_pycparser()


def c_layout(header, records, unions=()):
    """{record: (sizeof, {field: offsetof})} as the C compiler lays them out."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "%s"' % header, "int main(void) {"]
    for name, fields in records.items():
        tag = "%s %s" % ("union" if name in unions else "struct", name)
        lines.append('  printf("%s %%zu\\n", sizeof(%s));' % (name, tag))
        for f in fields:
            lines.append('  printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, f, tag, f))
    lines.append("  return 0;\n}\n")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        with open(src, "w") as fh:
            fh.write("\n".join(lines))
        subprocess.run([CC, "-std=c99", "-o", exe, src], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    result = {}
    for line in out.splitlines():
        key, value = line.split()
        rec, _, fld = key.partition(".")
        size, offs = result.setdefault(rec, [0, {}])
        if fld:
            offs[fld] = int(value)
        else:
            result[rec][0] = int(value)
    return {k: (v[0], v[1]) for k, v in result.items()}


def ctypes_layout(module, records):
    out = {}
    for name in records:
        cls = getattr(module, name)
        out[name] = (ctypes.sizeof(cls), {f[0]: getattr(cls, f[0]).offset for f in cls._fields_ if len(f) == 2})
    return out


def plain_fields(module, name):
    return [f[0] for f in getattr(module, name)._fields_ if len(f) == 2]


class GeneratedModule(unittest.TestCase):
    @unittest.skipUnless(CC, "needs a C compiler")
    def test_every_structure_has_the_c_layout(self):
        records = {r: plain_fields(_capi, r) for r in _capi.RECORDS}
        self.assertGreaterEqual(len(records), 14)
        self.assertEqual(ctypes_layout(_capi, records), c_layout(HEADER, records))

    def test_status_table_is_the_librarys(self):
        self.assertEqual(_capi.STATUSES[0], ("FL_OK", 0, "success"))
        for name, value, text in _capi.STATUSES:
            self.assertEqual(_ffi.status_name(value), name)
            self.assertEqual(_ffi.status_string(value), text)
            self.assertEqual(getattr(_capi, name), value)
        # one exception class per failure status, with the table's value and description
        self.assertEqual(sorted(errors.STATUS_CLASSES), [v for _, v, _ in _capi.STATUSES[1:]])
        for name, value, text in _capi.STATUSES[1:]:
            cls = errors.STATUS_CLASSES[value]
            self.assertEqual(cls.status, value)
            self.assertEqual(cls.c_name, name)
            self.assertIn(text, cls.__doc__)

    def test_size_prefixed_descriptors_are_known(self):
        self.assertIn("fl_engine_desc", _capi.SIZED)
        self.assertNotIn("fl_device", _capi.SIZED)
        d = _ffi.init(_capi.fl_host_instr)
        self.assertEqual(d.struct_size, ctypes.sizeof(_capi.fl_host_instr))

    @unittest.skipUnless(PYCPARSER and CC, "needs python3-pycparser and a C compiler")
    def test_checked_in_module_is_what_the_header_generates(self):
        with tempfile.TemporaryDirectory() as d:
            for _ in range(2):  # twice: the output must be deterministic
                subprocess.run([PYCPARSER, GEN, "--no-rust", "--out-root", d], check=True)
                with open(os.path.join(d, "bindings/python/flowlane/_capi.py")) as fh:
                    generated = fh.read()
                with open(_capi.__file__) as fh:
                    self.assertEqual(fh.read(), generated,
                                     "flowlane/_capi.py is stale: run scripts/dev/gen-bindings.sh")

    @unittest.skipUnless(PYCPARSER and CC and shutil.which("bindgen") and shutil.which("rustfmt"),
                         "needs python3-pycparser, bindgen and rustfmt (scripts/setup.sh installs them)")
    def test_check_mode_passes_and_catches_a_stale_file(self):
        with tempfile.TemporaryDirectory() as d:
            for rel in ("scripts/dev/gen-bindings.sh", "scripts/dev/gen_bindings.py", "capi/include/flowlane/flowlane.h",
                        "bindings/python/flowlane/_capi.py", "bindings/rust/flowlane-sys/src/bindgen.rs",
                        "bindings/rust/flowlane-sys/src/header.rs"):
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                shutil.copy2(os.path.join(REPO, rel), os.path.join(d, rel))
            script = os.path.join(d, "scripts", "dev", "gen-bindings.sh")
            ok = subprocess.run([script, "--check"], capture_output=True, text=True)
            self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
            with open(os.path.join(d, "capi/include/flowlane/flowlane.h"), "a") as fh:
                fh.write("\n#define FL_ADDED_LATER 42\n")
            stale = subprocess.run([script, "--check"], capture_output=True, text=True)
            self.assertEqual(stale.returncode, 1, stale.stdout + stale.stderr)
            self.assertIn("+FL_ADDED_LATER = 42", stale.stdout)
            self.assertIn("run scripts/dev/gen-bindings.sh", stale.stderr)


SYNTHETIC = r"""
#ifndef SYNTH_H
#define SYNTH_H
#include <stddef.h>
#include <stdint.h>
#if defined(__GNUC__)
#  define FL_API __attribute__((visibility("default")))
#  define FL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#  define FL_API
#  define FL_DEPRECATED(msg)
#endif
#define FL_MASK (0xffu << 4)
#define FL_BIG ((uint64_t)1 << 40)
#define FL_NEG (-3)
#define FL_CHAR 'A'
#define FL_STR "not an integer"
#define FL_T_INIT { sizeof(fl_t_t), 0 }
#define FL_STATUS_MAP(X) X(FL_OK, 0, "ok") X(FL_ERR_A, 1, "first " "half") X(FL_ERR_NEW_THING, 2, "brand new")
typedef enum fl_status {
#define E_(n, v, t) n = v,
  FL_STATUS_MAP(E_)
#undef E_
  FL_STATUS_END_
} fl_status_t;
enum { FL_A = -1, FL_B, FL_C = FL_B + 10 };
typedef struct fl_handle fl_handle_t;
typedef struct fl_inner { int32_t a; uint8_t b; } fl_inner_t;
typedef union fl_u { uint32_t u; double d; } fl_u_t;
typedef void (*fl_cb)(const char* const* names, size_t n, void* user_data);
typedef struct fl_t {
  uint64_t struct_size;
  fl_inner_t inner;
  char name[FL_CHAR - 60];
  const void* const* args;
  fl_cb cb;
  struct fl_t* next;
  fl_u_t u;
  unsigned flag : 1;
  unsigned rest : 7;
  double d;
  fl_handle_t** handles;
} fl_t_t;
FL_API fl_status_t fl_new_name(fl_handle_t** out, const fl_t_t* t);
FL_API FL_DEPRECATED("use fl_new_name") fl_status_t fl_old_name(fl_handle_t** out, const fl_t_t* t);
#define fl_older_name fl_new_name
FL_API int fl_printf(const char* fmt, ...);
static inline int fl_helper(int x) { return x + 1; }
FL_API void fl_take_fn(void (*f)(int), const int arr[4], fl_inner_t by_value);
#endif
"""


@unittest.skipUnless(PYCPARSER and CC, "needs python3-pycparser and a C compiler")
class GeneratorCopesWithC99(unittest.TestCase):
    """Constructs the header may grow: unions, bitfields, deprecated spellings, variadics,
    function-pointer parameters, array parameters, const pointer-to-pointer, casts."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        inc = os.path.join(cls.dir, "include", "synth")
        os.makedirs(inc)
        cls.header = os.path.join(inc, "synth.h")
        with open(cls.header, "w") as fh:
            fh.write(textwrap.dedent(SYNTHETIC))
        subprocess.run([PYCPARSER, GEN, "--no-rust", "--header", cls.header, "--out-root", cls.dir], check=True)
        spec = importlib.util.spec_from_file_location(
            "synth_capi", os.path.join(cls.dir, "bindings/python/flowlane/_capi.py"))
        cls.m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.m)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_constants(self):
        m = self.m
        self.assertEqual((m.FL_MASK, m.FL_BIG, m.FL_NEG, m.FL_CHAR), (0xFF0, 1 << 40, -3, 65))
        self.assertFalse(hasattr(m, "FL_STR") or hasattr(m, "FL_T_INIT"))
        self.assertEqual((m.FL_A, m.FL_B, m.FL_C), (-1, 0, 10))
        self.assertEqual(m.STATUSES, (("FL_OK", 0, "ok"), ("FL_ERR_A", 1, "first half"),
                                      ("FL_ERR_NEW_THING", 2, "brand new")))
        self.assertIs(m.fl_status_t, ctypes.c_uint)  # non-negative enumerators: unsigned
        self.assertIn(("", (("FL_A", -1), ("FL_B", 0), ("FL_C", 10))), m.ENUMS)

    def test_functions(self):
        f = self.m.FUNCTIONS
        self.assertEqual(list(f), ["fl_new_name", "fl_old_name", "fl_printf", "fl_take_fn"])
        res, args = f["fl_new_name"]
        self.assertIs(res, ctypes.c_uint)
        self.assertEqual(args[0], ctypes.POINTER(ctypes.POINTER(self.m.fl_handle)))
        self.assertEqual(f["fl_printf"][1], [ctypes.c_char_p])
        take = f["fl_take_fn"][1]
        self.assertTrue(issubclass(take[0], ctypes._CFuncPtr))
        self.assertEqual(take[1], ctypes.POINTER(ctypes.c_int))
        self.assertIs(take[2], self.m.fl_inner)
        self.assertEqual(self.m.ALIASES, {"fl_older_name": "fl_new_name"})
        self.assertEqual(self.m.PARAMS["fl_take_fn"], ("f", "arr", "by_value"))

    def test_records_and_layout(self):
        m = self.m
        self.assertEqual(m.SIZED, ("fl_t",))
        fields = [f[0] for f in m.fl_t._fields_]
        self.assertEqual(fields, ["struct_size", "inner", "name", "args", "cb", "next", "u", "flag", "rest", "d",
                                  "handles"])
        self.assertEqual(m.fl_t._fields_[2][1], ctypes.c_char * 5)
        self.assertEqual(m.fl_t._fields_[3][1], ctypes.POINTER(ctypes.c_void_p))
        self.assertEqual(m.fl_t._fields_[5][1], ctypes.POINTER(m.fl_t))
        self.assertEqual(m.fl_t._fields_[7][2], 1)
        self.assertTrue(issubclass(m.fl_u, ctypes.Union))
        records = {r: plain_fields(m, r) for r in m.RECORDS}
        self.assertEqual(ctypes_layout(m, records), c_layout(self.header, records, unions={"fl_u"}))
        self.assertEqual(ctypes.sizeof(m.fl_t), c_layout(self.header, {"fl_t": []})["fl_t"][0])

    def test_a_header_without_a_status_table_is_refused_with_a_reason(self):
        bad = os.path.join(self.dir, "include", "synth", "nostatus.h")
        with open(bad, "w") as fh:
            fh.write("int fl_x(void);\n")
        r = subprocess.run([PYCPARSER, GEN, "--no-rust", "--header", bad, "--out-root", self.dir],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("FL_STATUS_MAP", r.stderr)


if __name__ == "__main__":
    unittest.main()
