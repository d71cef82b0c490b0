#!/usr/bin/env python3
"""Generates the binding declarations of flowlane from its public C header.

    scripts/dev/gen_bindings.py [--header H] [--out-root DIR] [--no-rust]

Reads capi/include/flowlane/flowlane.h (the C API is the single source of truth) and writes,
relative to the repository root (or to --out-root, which scripts/dev/gen-bindings.sh --check
uses to compare):

  bindings/python/flowlane/_capi.py       ctypes: every integer constant (#define and enum),
                                          the status table (FL_STATUS_MAP), opaque handles,
                                          structures with their fields in order, function
                                          pointer types, and argtypes/restype of every function
  bindings/rust/flowlane-sys/src/bindgen.rs   bindgen's declarations and layout tests (size,
                                          alignment and the offset of every field)
  bindings/rust/flowlane-sys/src/header.rs    what bindgen does not give: the status table,
                                          init() for size-prefixed descriptors, and integer
                                          macros bindgen cannot evaluate (casts)

How: the header is run through the C preprocessor (`cc -E`, with small stand-ins for
<stddef.h>/<stdint.h> so that the fixed-width type names survive) and parsed with
pycparser (Debian: python3-pycparser). Integer #defines are found by a simple scan of the
header, expanded by the same preprocessor and evaluated here; the status table comes from
expanding FL_STATUS_MAP with a collecting X macro. Rust declarations come from bindgen
(Debian: bindgen, which needs rustfmt), with a `// SAFETY:` line added to each unsafe
block it writes. Output is deterministic: header order, no timestamps, no versions.

Standard library + pycparser only. Exit status 2 with a message when a tool is missing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "capi" / "include" / "flowlane" / "flowlane.h"
PY_OUT = Path("bindings/python/flowlane/_capi.py")
RS_BINDGEN_OUT = Path("bindings/rust/flowlane-sys/src/bindgen.rs")
RS_HEADER_OUT = Path("bindings/rust/flowlane-sys/src/header.rs")
PREFIXES = ("fl_", "FL_")  # what the bindings take from the header (bindgen's allowlist too)

try:
    from pycparser import c_ast, c_parser
except ImportError:  # pragma: no cover - reported to the user
    sys.stderr.write("gen_bindings.py: pycparser is missing (Debian: apt-get install python3-pycparser)\n")
    sys.exit(2)


class GenError(Exception):
    """The header contains something the generator cannot translate (with the reason)."""


# ---------------------------------------------------------------------------------------
# C types

# Scalar types by their C spelling: (ctypes name, Rust name, bits, signed).
SCALARS: Dict[str, Tuple[str, str, int, bool]] = {
    "char": ("c_char", "c_char", 8, True),
    "signed char": ("c_byte", "i8", 8, True),
    "unsigned char": ("c_ubyte", "u8", 8, False),
    "short": ("c_short", "i16", 16, True),
    "unsigned short": ("c_ushort", "u16", 16, False),
    "int": ("c_int", "i32", 32, True),
    "unsigned int": ("c_uint", "u32", 32, False),
    "long": ("c_long", "i64", 64, True),
    "unsigned long": ("c_ulong", "u64", 64, False),
    "long long": ("c_longlong", "i64", 64, True),
    "unsigned long long": ("c_ulonglong", "u64", 64, False),
    "float": ("c_float", "f32", 32, True),
    "double": ("c_double", "f64", 64, True),
    "_Bool": ("c_bool", "bool", 8, False),
    "int8_t": ("c_int8", "i8", 8, True),
    "uint8_t": ("c_uint8", "u8", 8, False),
    "int16_t": ("c_int16", "i16", 16, True),
    "uint16_t": ("c_uint16", "u16", 16, False),
    "int32_t": ("c_int32", "i32", 32, True),
    "uint32_t": ("c_uint32", "u32", 32, False),
    "int64_t": ("c_int64", "i64", 64, True),
    "uint64_t": ("c_uint64", "u64", 64, False),
    "intptr_t": ("c_ssize_t", "isize", 64, True),
    "uintptr_t": ("c_size_t", "usize", 64, False),
    "intmax_t": ("c_int64", "i64", 64, True),
    "uintmax_t": ("c_uint64", "u64", 64, False),
    "size_t": ("c_size_t", "usize", 64, False),
    "ptrdiff_t": ("c_ssize_t", "isize", 64, True),
}

# Stand-ins for the two standard headers flowlane.h includes: the names matter (they are
# mapped by name above), the underlying types do not.
FAKE_STDDEF = """#ifndef FLGEN_STDDEF_H
#define FLGEN_STDDEF_H
typedef unsigned long size_t;
typedef long ptrdiff_t;
#define NULL ((void*)0)
#define offsetof(t, m) __builtin_offsetof(t, m)
#endif
"""
FAKE_STDINT = """#ifndef FLGEN_STDINT_H
#define FLGEN_STDINT_H
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
typedef long intmax_t;
typedef unsigned long uintmax_t;
#define INT8_MAX 127
#define UINT8_MAX 255
#define INT16_MAX 32767
#define UINT16_MAX 65535
#define INT32_MAX 2147483647
#define UINT32_MAX 4294967295u
#define INT64_MAX 9223372036854775807l
#define UINT64_MAX 18446744073709551615ul
#define UINT64_C(x) x##ul
#define INT64_C(x) x##l
#define UINT32_C(x) x##u
#define INT32_C(x) x
#endif
"""


@dataclass(frozen=True)
class CType:
    """A C type: kind is scalar, void, typedef, struct, union, enum, ptr, array or func."""

    kind: str
    name: str = ""  # scalar/typedef/struct/union/enum name
    inner: Optional["CType"] = None  # ptr/array element, func return
    const: bool = False  # ptr: the pointee is const
    length: int = 0  # array
    params: Tuple[Tuple[str, "CType"], ...] = ()  # func
    variadic: bool = False


@dataclass
class Field:
    name: str
    ctype: CType
    bits: Optional[int] = None


@dataclass
class Record:
    """A struct or union; opaque when only declared."""

    kind: str  # "struct" or "union"
    tag: str
    fields: Optional[List[Field]] = None


@dataclass
class Enum:
    tag: Optional[str]
    members: List[Tuple[str, int]]

    @property
    def signed(self) -> bool:
        return any(v < 0 for _, v in self.members)

    @property
    def wide(self) -> bool:
        return any(v > 0xFFFFFFFF or v < -(2**31) for _, v in self.members)


@dataclass
class Typedef:
    name: str
    ctype: CType


@dataclass
class Function:
    name: str
    ret: CType
    params: List[Tuple[str, CType]]
    variadic: bool = False


@dataclass
class Define:
    name: str
    value: int
    ctype: str  # the C type of the expression (a SCALARS key)


@dataclass
class Status:
    name: str
    value: int
    text: str


@dataclass
class Header:
    items: List[Tuple[str, object]] = field(default_factory=list)  # (kind, item), header order
    records: Dict[str, Record] = field(default_factory=dict)
    enums: List[Enum] = field(default_factory=list)
    typedefs: Dict[str, Typedef] = field(default_factory=dict)
    functions: List[Function] = field(default_factory=list)
    defines: List[Define] = field(default_factory=list)
    statuses: List[Status] = field(default_factory=list)
    aliases: Dict[str, str] = field(default_factory=dict)  # #define fl_old fl_new

    def enum_constants(self) -> Dict[str, int]:
        return {n: v for e in self.enums for n, v in e.members}


def wanted(name: Optional[str]) -> bool:
    return name is not None and name.startswith(PREFIXES)


def is_sized(rec: "Record") -> bool:
    """A size-prefixed descriptor: its first field is struct_size."""
    return bool(rec.fields) and rec.fields[0].name == "struct_size"  # type: ignore[index]


# ---------------------------------------------------------------------------------------
# Preprocessing and parsing


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise GenError("no C compiler for preprocessing (set CC, or apt-get install gcc)")
    return cc


def preprocess(source: str, header: Path, fake_dir: Path) -> str:
    """Runs `cc -E` on `source` (C text that may #include the header)."""
    cmd = [
        compiler(), "-E", "-P", "-std=c99", "-nostdinc", "-I", str(fake_dir),
        "-I", str(header.parent.parent), "-D__attribute__(x)=", "-D__extension__=", "-D__restrict=restrict",
        "-D__inline=inline", "-D__asm__(x)=", "-x", "c", "-",
    ]
    r = subprocess.run(cmd, input=source, capture_output=True, text=True)
    if r.returncode != 0:
        raise GenError("the C preprocessor failed on %s:\n%s" % (header, r.stderr))
    return r.stdout


def include_line(header: Path) -> str:
    return '#include "%s"\n' % header.resolve()


class Evaluator:
    """Evaluates integer constant expressions (pycparser nodes), tracking their C type."""

    def __init__(self, constants: Dict[str, int], typedefs: Dict[str, Typedef]):
        self.constants = constants
        self.typedefs = typedefs

    def scalar_of(self, node: c_ast.Node) -> str:
        """The scalar type a cast names (typedefs resolved; enums are int)."""
        t = node.type
        while isinstance(t, c_ast.TypeDecl):
            t = t.type
        if isinstance(t, c_ast.IdentifierType):
            name = canonical_scalar(t.names)
            while name not in SCALARS and name in self.typedefs:
                ct = self.typedefs[name].ctype
                if ct.kind in ("scalar", "typedef"):
                    name = ct.name
                elif ct.kind == "enum":
                    return "int"
                else:
                    break
            if name in SCALARS:
                return name
        raise GenError("not an integer cast")

    def eval(self, node: c_ast.Node) -> Tuple[int, str]:
        if isinstance(node, c_ast.Constant):
            return int_literal(node.value, node.type)
        if isinstance(node, c_ast.ID):
            if node.name in self.constants:
                return self.constants[node.name], "int"
            raise GenError("unknown identifier %s" % node.name)
        if isinstance(node, c_ast.Cast):
            v, _ = self.eval(node.expr)
            t = self.scalar_of(node.to_type)
            return wrap(v, t), t
        if isinstance(node, c_ast.UnaryOp):
            v, t = self.eval(node.expr)
            ops = {"-": lambda x: -x, "+": lambda x: x, "~": lambda x: ~x, "!": lambda x: int(not x)}
            if node.op not in ops:
                raise GenError("operator %s" % node.op)
            return wrap(ops[node.op](v), t), ("int" if node.op == "!" else t)
        if isinstance(node, c_ast.BinaryOp):
            a, ta = self.eval(node.left)
            b, tb = self.eval(node.right)
            t = common_type(ta, tb)
            if node.op in ("<<", ">>"):
                t = ta
            ops = {
                "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
                "/": lambda x, y: int(x / y), "%": lambda x, y: x - int(x / y) * y,
                "<<": lambda x, y: x << y, ">>": lambda x, y: x >> y, "|": lambda x, y: x | y,
                "&": lambda x, y: x & y, "^": lambda x, y: x ^ y,
            }
            cmp = {
                "<": lambda x, y: x < y, ">": lambda x, y: x > y, "<=": lambda x, y: x <= y,
                ">=": lambda x, y: x >= y, "==": lambda x, y: x == y, "!=": lambda x, y: x != y,
                "&&": lambda x, y: bool(x and y), "||": lambda x, y: bool(x or y),
            }
            if node.op in ops:
                return wrap(ops[node.op](a, b), t), t
            if node.op in cmp:
                return int(cmp[node.op](a, b)), "int"
            raise GenError("operator %s" % node.op)
        if isinstance(node, c_ast.TernaryOp):
            c, _ = self.eval(node.cond)
            return self.eval(node.iftrue if c else node.iffalse)
        raise GenError("not an integer constant expression (%s)" % type(node).__name__)


def int_literal(text: str, kind: str) -> Tuple[int, str]:
    if kind == "char":
        body = text[1:-1]
        if body.startswith("\\"):
            esc = {"n": 10, "t": 9, "0": 0, "\\": 92, "'": 39, "r": 13}
            if body[1:] in esc:
                return esc[body[1:]], "int"
            raise GenError("character escape %s" % text)
        return ord(body), "int"
    if kind not in ("int", "unsigned int", "long int", "unsigned long int", "long long int",
                    "unsigned long long int"):
        raise GenError("not an integer literal: %s" % text)
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([uUlL]*)", text)
    if not m:
        raise GenError("integer literal %s" % text)
    digits, suffix = m.groups()
    v = int(digits, 16) if digits[:2].lower() == "0x" else (int(digits, 8) if len(digits) > 1 and digits[0] == "0"
                                                             else int(digits))
    s = suffix.lower()
    unsigned = "u" in s
    longs = s.count("l")
    decimal = not (digits.startswith("0") and len(digits) > 1)
    if longs == 0 and v <= (0xFFFFFFFF if unsigned else 0x7FFFFFFF):
        t = "unsigned int" if unsigned else "int"
    elif longs == 0 and not decimal and v <= 0xFFFFFFFF:
        t = "unsigned int"
    else:
        t = "unsigned long" if unsigned or v > 0x7FFFFFFFFFFFFFFF else "long"
    return v, t


def wrap(v: int, t: str) -> int:
    _, _, bits, signed = SCALARS[t]
    v &= (1 << bits) - 1
    if signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def common_type(a: str, b: str) -> str:
    """C's usual arithmetic conversions, for the integer types of SCALARS."""
    def rank(t: str) -> Tuple[int, bool]:
        _, _, bits, signed = SCALARS[t]
        return max(bits, 32), signed

    ra, rb = rank(a), rank(b)
    bits = max(ra[0], rb[0])
    unsigned = (ra[0] == bits and not ra[1]) or (rb[0] == bits and not rb[1])
    if bits == 32:
        return "unsigned int" if unsigned else "int"
    return "unsigned long" if unsigned else "long"


def canonical_scalar(names: Sequence[str]) -> str:
    """['unsigned', 'long', 'int'] -> 'unsigned long'; typedef names pass through."""
    words = list(names)
    if len(words) == 1 and words[0] not in ("signed", "unsigned", "short", "long", "int", "char"):
        return words[0]
    unsigned = "unsigned" in words
    signed = "signed" in words
    longs = words.count("long")
    if "char" in words:
        return "unsigned char" if unsigned else ("signed char" if signed else "char")
    if "short" in words:
        base = "short"
    elif longs >= 2:
        base = "long long"
    elif longs == 1:
        base = "long"
    else:
        base = "int"
    return ("unsigned " + base) if unsigned else base


class HeaderParser:
    """Builds the Header model from pycparser's AST, in declaration order."""

    def __init__(self, header: Header):
        self.h = header
        self.anon = 0
        self.constants: Dict[str, int] = {}

    def evaluator(self) -> Evaluator:
        return Evaluator(self.constants, self.h.typedefs)

    def ctype(self, node: c_ast.Node, context: str) -> CType:
        if isinstance(node, c_ast.TypeDecl):
            return self.ctype(node.type, context)
        if isinstance(node, c_ast.IdentifierType):
            name = canonical_scalar(node.names)
            if name == "void":
                return CType("void")
            if name in SCALARS:
                return CType("scalar", name)
            if name in self.h.typedefs:
                return CType("typedef", name)
            raise GenError("%s: unknown type %s" % (context, name))
        if isinstance(node, (c_ast.Struct, c_ast.Union)):
            kind = "struct" if isinstance(node, c_ast.Struct) else "union"
            tag = self.record(node, context)
            return CType(kind, tag)
        if isinstance(node, c_ast.Enum):
            tag = self.enum(node, context)
            return CType("enum", tag)
        if isinstance(node, c_ast.PtrDecl):
            inner_node = node.type
            const = isinstance(inner_node, c_ast.TypeDecl) and "const" in (inner_node.quals or [])
            if isinstance(inner_node, c_ast.PtrDecl):
                const = "const" in (inner_node.quals or [])
            return CType("ptr", inner=self.ctype(inner_node, context), const=const)
        if isinstance(node, c_ast.ArrayDecl):
            if node.dim is None:
                raise GenError("%s: an array without a length" % context)
            n, _ = self.evaluator().eval(node.dim)
            return CType("array", inner=self.ctype(node.type, context), length=n)
        if isinstance(node, c_ast.FuncDecl):
            params, variadic = self.params(node.args, context)
            return CType("func", inner=self.ctype(node.type, context), params=tuple(params), variadic=variadic)
        raise GenError("%s: unsupported type node %s" % (context, type(node).__name__))

    def params(self, plist: Optional[c_ast.ParamList], context: str) -> Tuple[List[Tuple[str, CType]], bool]:
        out: List[Tuple[str, CType]] = []
        variadic = False
        if plist is None:
            return out, False
        for i, p in enumerate(plist.params):
            if isinstance(p, c_ast.EllipsisParam):
                variadic = True
                continue
            t = self.ctype(p.type, context)
            if t.kind == "void":
                continue  # f(void)
            if t.kind == "array":  # an array parameter is a pointer
                t = CType("ptr", inner=t.inner)
            if t.kind == "func":  # a function parameter is a function pointer
                t = CType("ptr", inner=t)
            out.append((getattr(p, "name", None) or "arg%d" % i, t))
        return out, variadic

    def record(self, node: c_ast.Node, context: str) -> str:
        kind = "struct" if isinstance(node, c_ast.Struct) else "union"
        tag = node.name
        if tag is None:
            self.anon += 1
            tag = re.sub(r"\W", "_", "%s_anon%d" % (context, self.anon))
        rec = self.h.records.get(tag)
        if rec is None:
            rec = Record(kind, tag)
            self.h.records[tag] = rec
            self.h.items.append(("record", rec))
        if node.decls is not None:
            if rec.fields is not None:
                raise GenError("%s %s defined twice" % (kind, tag))
            fields: List[Field] = []
            for d in node.decls:
                fname = d.name or "anon%d" % len(fields)
                ft = self.ctype(d.type, "%s.%s" % (tag, fname))
                bits = self.evaluator().eval(d.bitsize)[0] if d.bitsize is not None else None
                fields.append(Field(fname, ft, bits))
            rec.fields = fields
            # Defined after a forward declaration: move it to where its body is.
            self.h.items.remove(("record", rec))
            self.h.items.append(("record", rec))
        return tag

    def enum(self, node: c_ast.Enum, context: str) -> str:
        tag = node.name
        if node.values is None:
            return tag or ""
        members: List[Tuple[str, int]] = []
        nxt = 0
        for e in node.values.enumerators:
            v = self.evaluator().eval(e.value)[0] if e.value is not None else nxt
            self.constants[e.name] = v
            members.append((e.name, v))
            nxt = v + 1
        en = Enum(tag, members)
        self.h.enums.append(en)
        self.h.items.append(("enum", en))
        return tag or ""

    def walk(self, ast: c_ast.FileAST) -> None:
        for ext in ast.ext:
            if isinstance(ext, c_ast.Typedef):
                if ext.name in SCALARS:
                    continue  # the stand-in <stdint.h>/<stddef.h>
                t = self.ctype(ext.type, ext.name)
                td = Typedef(ext.name, t)
                self.h.typedefs[ext.name] = td
                if wanted(ext.name):
                    self.h.items.append(("typedef", td))
            elif isinstance(ext, c_ast.Decl):
                if "static" in (ext.storage or []) or "inline" in (ext.funcspec or []):
                    continue  # not exported by the library
                if isinstance(ext.type, c_ast.FuncDecl):
                    params, variadic = self.params(ext.type.args, ext.name)
                    fn = Function(ext.name, self.ctype(ext.type.type, ext.name), params, variadic)
                    if wanted(fn.name):
                        self.h.functions.append(fn)
                        self.h.items.append(("function", fn))
                elif isinstance(ext.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
                    self.ctype(ext.type, ext.name or "decl")
                # Variables (extern int fl_x;) are not part of this API: ignored.
            elif isinstance(ext, c_ast.FuncDef):
                continue  # static inline helpers live in the header only


def parse(text: str, what: str) -> c_ast.FileAST:
    try:
        return c_parser.CParser().parse(text, what)
    except Exception as e:  # pycparser raises ParseError with file:line:col
        raise GenError("pycparser cannot parse %s: %s" % (what, e)) from None


DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)(\(?)(.*)$", re.M)


def read_header(header: Path) -> Header:
    h = Header()
    text = header.read_text()
    joined = text.replace("\\\n", " ")
    with tempfile.TemporaryDirectory(prefix="flgen-") as tmp:
        fake = Path(tmp)
        (fake / "stddef.h").write_text(FAKE_STDDEF)
        (fake / "stdint.h").write_text(FAKE_STDINT)
        parser = HeaderParser(h)
        parser.walk(parse(preprocess(include_line(header), header, fake), str(header)))

        # Object-like macros of the API: expanded by the preprocessor, evaluated here.
        names: List[str] = []
        for m in DEFINE_RE.finditer(joined):
            name, paren, body = m.group(1), m.group(2), m.group(3).strip()
            body = re.sub(r"/\*.*?\*/", " ", body).strip()
            if paren or not wanted(name) or not body:
                continue
            names.append(name)
        keywords = {"char", "short", "int", "long", "float", "double", "_Bool", "void", "signed", "unsigned"}
        typedef_decls = "".join("typedef int %s;\n" % n for n in list(SCALARS) + list(h.typedefs)
                                if " " not in n and n not in keywords)
        if names or "FL_STATUS_MAP" in joined:
            probe = include_line(header)
            # The index, not the name, marks each expansion: the name would be expanded too.
            probe += "".join("flgen_define_begin %d flgen_sep (%s) flgen_define_end\n" % (i, n)
                             for i, n in enumerate(names))
            if re.search(r"#\s*define\s+FL_STATUS_MAP\s*\(", joined):
                probe += ('#define FLGEN_STATUS_(name, value, text) flgen_status(#name, (value), text);\n'
                          "void flgen_statuses(void) { FL_STATUS_MAP(FLGEN_STATUS_) }\n")
            out = preprocess(probe, header, fake)
            ev = Evaluator(dict(parser.constants), h.typedefs)
            for m in re.finditer(r"flgen_define_begin\s+(\d+)\s+flgen_sep\s+(.*?)\s*flgen_define_end", out, re.S):
                name, expansion = names[int(m.group(1))], m.group(2)
                try:
                    ast = parse(typedef_decls + "int flgen_value = %s;\n" % expansion, name)
                    init = ast.ext[-1].init
                    value, ctype = ev.eval(init)
                except GenError:
                    continue  # not an integer constant (an initializer list, a string, ...)
                h.defines.append(Define(name, value, ctype))
                ev.constants[name] = value
            m = re.search(r"void flgen_statuses\(void\)\s*\{(.*)\}", out, re.S)
            if m:
                body = parse(typedef_decls + "void flgen_statuses(void) {%s}\n" % m.group(1), "FL_STATUS_MAP")
                for stmt in body.ext[-1].body.block_items or []:
                    args = stmt.args.exprs
                    name = c_string(args[0].value)
                    value, _ = ev.eval(args[1])
                    h.statuses.append(Status(name, value, c_string(args[2].value)))
        # `#define fl_old_name fl_new_name`: a deprecated spelling of a function.
        fnames = {f.name for f in h.functions}
        for m in DEFINE_RE.finditer(joined):
            name, paren, body = m.group(1), m.group(2), m.group(3).strip()
            if not paren and body in fnames and name not in fnames:
                h.aliases[name] = body
    check_statuses(h)
    return h


def c_string(literal: str) -> str:
    """The value of a C string literal as pycparser returns it (adjacent literals joined)."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', literal)
    s = "".join(parts)
    return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def check_statuses(h: Header) -> None:
    if not h.statuses:
        raise GenError("the header has no FL_STATUS_MAP(X) table: the bindings need one")
    seen: Dict[int, str] = {}
    for s in h.statuses:
        if s.value in seen:
            raise GenError("FL_STATUS_MAP: %s and %s share the value %d" % (seen[s.value], s.name, s.value))
        seen[s.value] = s.name
    if h.statuses[0].name != "FL_OK" or h.statuses[0].value != 0:
        raise GenError("FL_STATUS_MAP must start with FL_OK = 0")


# ---------------------------------------------------------------------------------------
# Python (ctypes)


class PyTypes:
    def __init__(self, h: Header):
        self.h = h

    def resolve(self, t: CType) -> CType:
        while t.kind == "typedef":
            t = self.h.typedefs[t.name].ctype
        return t

    def enum_ctype(self, tag: str) -> str:
        for e in self.h.enums:
            if e.tag == tag:
                if e.wide:
                    return "c_int64" if e.signed else "c_uint64"
                return "c_int" if e.signed else "c_uint"
        return "c_int"  # an enum only declared: int-sized

    def expr(self, t: CType) -> str:
        """A Python expression for the ctypes type of t (None for void)."""
        if t.kind == "void":
            return "None"
        if t.kind == "scalar":
            return SCALARS[t.name][0]
        if t.kind == "typedef":
            return t.name
        if t.kind in ("struct", "union"):
            return t.name
        if t.kind == "enum":
            return self.enum_ctype(t.name)
        if t.kind == "array":
            assert t.inner is not None
            return "(%s * %d)" % (self.expr(t.inner), t.length)
        if t.kind == "func":
            return self.functype(t)
        if t.kind == "ptr":
            inner = t.inner
            assert inner is not None
            target = self.resolve(inner)
            if target.kind == "void":
                return "c_void_p"
            if target.kind == "scalar" and target.name == "char":
                return "c_char_p"
            if target.kind == "func":
                return self.expr(inner) if inner.kind == "typedef" else self.functype(target)
            return "POINTER(%s)" % self.expr(inner)
        raise GenError("no ctypes type for %r" % (t,))

    def functype(self, t: CType) -> str:
        if t.variadic:
            raise GenError("ctypes cannot declare a variadic function pointer type")
        assert t.inner is not None
        args = [self.expr(t.inner)] + [self.expr(p) for _, p in t.params]
        return "CFUNCTYPE(%s)" % ", ".join(args)


PY_PRELUDE = '''"""ctypes declarations of the flowlane C API, generated from capi/include/flowlane/flowlane.h
by scripts/dev/gen_bindings.py (scripts/dev/gen-bindings.sh). Do not edit: change the header
and regenerate; `scripts/dev/gen-bindings.sh --check` fails when this file is out of date.

Everything mirrors C one to one: integer constants (macros and enumerators), the status
table of FL_STATUS_MAP, opaque handle types, structures with their fields in order,
function pointer types and the signature of every function (FUNCTIONS). _ffi.py loads the
library and applies FUNCTIONS; errors.py builds the exception classes from STATUSES.
"""

# flake8: noqa
# mypy: disable-error-code="misc"
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    c_bool,
    c_byte,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int8,
    c_int16,
    c_int32,
    c_int64,
    c_long,
    c_longlong,
    c_short,
    c_size_t,
    c_ssize_t,
    c_ubyte,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from typing import Any, Dict, List, Tuple
'''


def py_module(h: Header) -> str:
    pt = PyTypes(h)
    out = [PY_PRELUDE]
    w = out.append

    w("\n# " + "-" * 86 + "\n# Integer macros (#define)\n\n")
    for d in h.defines:
        w("%s = %d\n" % (d.name, d.value))

    w("\n# " + "-" * 86 + "\n# Enumerations (name, members) in header order; each member is also a constant\n\n")
    for e in h.enums:
        for name, value in e.members:
            w("%s = %d\n" % (name, value))
    w("\nENUMS: Tuple[Tuple[str, Tuple[Tuple[str, int], ...]], ...] = (\n")
    for e in h.enums:
        w("    (%r, (\n%s    )),\n" % (e.tag or "", "".join("        (%r, %d),\n" % m for m in e.members)))
    w(")\n")

    w("\n# " + "-" * 86 + "\n# FL_STATUS_MAP: (name, value, description) of every status, in order\n\n")
    w("STATUSES: Tuple[Tuple[str, int, str], ...] = (\n")
    for s in h.statuses:
        w("    (%r, %d, %r),\n" % (s.name, s.value, s.text))
    w(")\n")

    w("\n# " + "-" * 86 + "\n# Structures and unions (opaque ones are handles, used through POINTER)\n\n")
    for tag, rec in h.records.items():
        base = "Structure" if rec.kind == "struct" else "Union"
        w("\nclass %s(%s):\n    pass\n\n" % (tag, base))

    w("\n# " + "-" * 86 + "\n# Typedefs, function pointer types and fields, in header order\n\n")
    records: List[str] = []
    for kind, item in h.items:
        if kind == "typedef":
            td = item
            assert isinstance(td, Typedef)
            w("%s = %s\n" % (td.name, pt.expr(td.ctype)))
        elif kind == "record":
            rec = item
            assert isinstance(rec, Record)
            if rec.fields is None:
                continue
            records.append(rec.tag)
            w("%s._fields_ = [\n" % rec.tag)
            for f in rec.fields:
                if f.bits is None:
                    w("    (%r, %s),\n" % (f.name, pt.expr(f.ctype)))
                else:
                    w("    (%r, %s, %d),\n" % (f.name, pt.expr(f.ctype), f.bits))
            w("]\n")
    w("\n#: Structures with a body, in header order (the layout test compares them with C).\n")
    w("RECORDS: Tuple[str, ...] = (\n%s)\n" % "".join("    %r,\n" % r for r in records))
    w("\n#: Structures whose first field is struct_size (size-prefixed descriptors).\n")
    sized = [r for r in records if is_sized(h.records[r])]
    w("SIZED: Tuple[str, ...] = (\n%s)\n" % "".join("    %r,\n" % r for r in sized))

    w("\n# " + "-" * 86 + "\n# Functions: name -> (restype, argtypes), in header order\n\n")
    w("FUNCTIONS: Dict[str, Tuple[Any, List[Any]]] = {\n")
    for f in h.functions:
        if f.variadic:
            w("    %r: (%s, [%s]),  # variadic: pass the extra arguments as ctypes instances\n"
              % (f.name, pt.expr(f.ret), ", ".join(pt.expr(t) for _, t in f.params)))
            continue
        w("    %r: (%s, [%s]),\n" % (f.name, pt.expr(f.ret), ", ".join(pt.expr(t) for _, t in f.params)))
    w("}\n")
    w("\n#: Parameter names of every function (for messages).\n")
    w("PARAMS: Dict[str, Tuple[str, ...]] = {\n")
    for f in h.functions:
        w("    %r: (%s),\n" % (f.name, "".join("%r, " % n for n, _ in f.params)))
    w("}\n")
    w("\n#: Deprecated spellings: `#define old new` in the header (old name -> function).\n")
    w("ALIASES: Dict[str, str] = {%s}\n" % ", ".join("%r: %r" % kv for kv in sorted(h.aliases.items())))
    return "".join(out)


# ---------------------------------------------------------------------------------------
# Rust


def camel(status_name: str) -> str:
    """FL_ERR_INVALID_ARGUMENT -> InvalidArgument; FL_OK -> Ok."""
    s = re.sub(r"^FL_(ERR_)?", "", status_name)
    return "".join(p.capitalize() for p in s.split("_") if p)


def rust_literal(text: str) -> str:
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


RUST_SCALAR_TYPES = {k: v[1] for k, v in SCALARS.items()}
RUST_SCALAR_TYPES.update({"int": "i32", "unsigned int": "u32", "long": "i64", "unsigned long": "u64"})


def rust_header_module(h: Header, bindgen_consts: Sequence[str]) -> str:
    out: List[str] = []
    w = out.append
    w("//! What bindgen does not give, generated from capi/include/flowlane/flowlane.h by\n")
    w("//! scripts/dev/gen_bindings.py (scripts/dev/gen-bindings.sh): the FL_STATUS_MAP table,\n")
    w("//! `init()` for the size-prefixed descriptors (the header's FL_*_INIT), and integer macros\n")
    w("//! that bindgen cannot evaluate. Do not edit; `scripts/dev/gen-bindings.sh --check` fails\n")
    w("//! when this file is out of date.\n\n")
    w("use super::*;\n\n")
    missing = [d for d in h.defines if d.name not in bindgen_consts]
    for d in missing:
        w("/// `#define %s` of the header (value %d).\n" % (d.name, d.value))
        w("pub const %s: %s = %d;\n" % (d.name, RUST_SCALAR_TYPES[d.ctype], d.value))
    if missing:
        w("\n")
    w("/// `FL_STATUS_MAP`: (name, value, description) of every status, in order.\n")
    w("pub const FL_STATUS_TABLE: &[(&str, fl_status_t, &str)] = &[\n")
    for s in h.statuses:
        w("    (%s, %s, %s),\n" % (rust_literal(s.name), s.name, rust_literal(s.text)))
    w("];\n\n")
    w("/// Calls `$m!` with every failure status of `FL_STATUS_MAP` (all but `FL_OK`), in order:\n")
    w("/// `$m! { (FL_ERR_INVALID_ARGUMENT, InvalidArgument, \"description\"), ... }` (the second\n")
    w("/// item is the name without `FL_ERR_`, in CamelCase). The safe crate builds its `ErrorKind`\n")
    w("/// from it, so a status appended to the header appears there after regeneration.\n")
    w("#[macro_export]\n")
    w("macro_rules! fl_error_statuses {\n    ($m:ident) => {\n        $m! {\n")
    for s in h.statuses[1:]:
        w("            (%s, %s, %s),\n" % (s.name, camel(s.name), rust_literal(s.text)))
    w("        }\n    };\n}\n")
    for tag, rec in h.records.items():
        if not is_sized(rec):
            continue
        w("\nimpl %s {\n" % tag)
        w("    /// All zero with `struct_size` set to the size of this version of the struct (the\n")
        w("    /// header's `FL_..._INIT` initializer).\n")
        w("    pub fn init() -> Self {\n")
        w("        %s { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }\n" % tag)
        w("    }\n}\n")
    return "".join(out)


BINDGEN_BANNER = (
    "// Rust declarations of capi/include/flowlane/flowlane.h, generated by bindgen through\n"
    "// scripts/dev/gen-bindings.sh (scripts/dev/gen_bindings.py), with a SAFETY line added to\n"
    "// each unsafe block. Do not edit: change the header and regenerate;\n"
    "// `scripts/dev/gen-bindings.sh --check` fails when this file is out of date. The #[test]\n"
    "// functions check the size, alignment and field offsets of every structure against the C\n"
    "// compiler's (clang's) layout.\n\n"
)

SAFETY_REASONS = (
    ("MaybeUninit::<", "only the address of a field inside an uninitialised value is computed; nothing is read"),
    ("write_bytes(", "all-zero bytes are a valid value of this plain C struct (integers, raw pointers, Option<fn>)"),
)


def add_safety_comments(code: str) -> str:
    lines = code.splitlines()
    out: List[str] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.endswith("unsafe {") and not stripped.startswith("//"):
            window = "\n".join(lines[i:i + 4])
            reason = next((r for key, r in SAFETY_REASONS if key in window),
                          "bindgen-generated glue; the invariants are those of the C declarations above")
            indent = line[: len(line) - len(line.lstrip())]
            out.append("%s// SAFETY: %s." % (indent, reason))
        out.append(line)
    return "\n".join(out) + "\n"


def run_bindgen(header: Path) -> str:
    bindgen = shutil.which("bindgen")
    if not bindgen:
        raise GenError("bindgen is missing (Debian: apt-get install bindgen rustfmt)")
    rustfmt = os.environ.get("RUSTFMT") or shutil.which("rustfmt")
    if not rustfmt:
        raise GenError("rustfmt is missing: bindgen formats its output with it (Debian: apt-get install rustfmt)")
    with tempfile.TemporaryDirectory(prefix="flgen-") as tmp:
        out = Path(tmp) / "bindgen.rs"
        cmd = [
            bindgen, str(header), "-o", str(out), "--disable-header-comment",
            "--allowlist-function", "fl_.*", "--allowlist-type", "fl_.*", "--allowlist-var", "FL_.*",
            "--no-prepend-enum-name", "--with-derive-default", "--no-doc-comments",
            "--", "-std=c99", "-I", str(header.parent.parent),
        ]
        env = dict(os.environ, RUSTFMT=rustfmt)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise GenError("bindgen failed:\n%s%s" % (r.stdout, r.stderr))
        if "rustfmt" in r.stderr.lower():
            raise GenError("bindgen could not format its output with %s:\n%s" % (rustfmt, r.stderr))
        return out.read_text()


# ---------------------------------------------------------------------------------------


def write(root: Path, rel: Path, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--header", type=Path, default=HEADER)
    ap.add_argument("--out-root", type=Path, default=ROOT, help="write the files under this directory")
    ap.add_argument("--no-rust", action="store_true", help="only the Python module (no bindgen)")
    args = ap.parse_args(argv)
    try:
        h = read_header(args.header)
        write(args.out_root, PY_OUT, py_module(h))
        if not args.no_rust:
            raw = run_bindgen(args.header)
            consts = re.findall(r"^pub const (\w+):", raw, re.M)
            write(args.out_root, RS_BINDGEN_OUT, BINDGEN_BANNER + add_safety_comments(raw))
            write(args.out_root, RS_HEADER_OUT, rust_header_module(h, consts))
    except GenError as e:
        sys.stderr.write("gen_bindings.py: %s\n" % e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
