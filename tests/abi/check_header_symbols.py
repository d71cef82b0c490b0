#!/usr/bin/env python3
"""Checks that the checked-in export list matches the public header exactly.

Usage: check_header_symbols.py <flowlane.h> <exported_symbols.txt>
       check_header_symbols.py <flowlane.h> --print     (prints the list the header implies)

Every function the header declares must be tagged FL_API (otherwise hidden visibility
would silently drop it from libflowlane.so) and must appear in exported_symbols.txt; the
list must name nothing else, be sorted (C locale) and have no duplicates. Every FL_API
declaration must also be documented: the comment right before it starts with its role tag
(CONSTRUCTOR:, DESTRUCTOR:, METHOD: or FUNCTION, as the header's conventions define them).
The library side (nm -D of libflowlane.so against the same list) is check_exports.cmake's job.
Standard library only.
"""
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ROLE_TAGS = ("CONSTRUCTOR:", "DESTRUCTOR:", "METHOD:", "FUNCTION")
# FL_DEPRECATED("replacement") sits among a declaration's specifiers; it is not the name.
DEPRECATED = re.compile(r'\bFL_DEPRECATED\s*\(\s*"[^"]*"\s*\)')


def untagged_declarations(text: str):
    """Yields (line, name) for every FL_API declaration (a line starting with FL_API) whose
    immediately preceding comment does not start with a role tag."""
    for m in re.finditer(r"^FL_API\b[^;]*;", text, flags=re.M):
        decl = DEPRECATED.sub(" ", m.group(0))
        name = re.search(r"(" + IDENT + r")\s*\(", decl)
        before = text[: m.start()].rstrip()
        line = text.count("\n", 0, m.start()) + 1
        comment = ""
        if before.endswith("*/"):
            comment = before[before.rfind("/*") + 2 : -2].strip()
        if not comment.startswith(ROLE_TAGS):
            yield line, name.group(1) if name else "?"


def strip_comments_and_macros(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # Join continued lines, then drop preprocessor lines (the FL_STATUS_MAP X-macro table,
    # FL_*_INIT initializers and include guards are not declarations).
    text = text.replace("\\\n", " ")
    # The C++-only parts (extern "C" { and its closing brace) sit in #ifdef __cplusplus.
    text = re.sub(r"^\s*#\s*ifdef\s+__cplusplus\b.*?^\s*#\s*endif[^\n]*", " ", text, flags=re.S | re.M)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def declarations(text: str):
    """Yields (name, has_fl_api) for every function declaration at file scope."""
    body = strip_comments_and_macros(text)
    # Remove struct/enum bodies (their members are not functions) and extern "C" braces.
    prev = None
    while prev != body:
        prev = body
        body = re.sub(r"\{[^{}]*\}", " ", body)
    for stmt in body.split(";"):
        stmt = " ".join(DEPRECATED.sub(" ", stmt).split())
        if not stmt or stmt.startswith("typedef"):
            continue  # typedefs of function pointers are types, not exported functions
        m = re.search(r"(" + IDENT + r")\s*\(", stmt)
        if not m:
            continue
        head = stmt[: m.start()]
        if re.search(r"\(\s*\*", stmt[: m.end()]):
            continue  # a function pointer variable, not a function
        yield m.group(1), bool(re.search(r"\bFL_API\b", head))


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    header_path, list_path = argv[1], argv[2]
    with open(header_path, encoding="utf-8") as f:
        text = f.read()
    decls = list(declarations(text))
    errors = []
    for line, name in untagged_declarations(text):
        errors.append(f"{header_path}:{line}: '{name}' has no role tag: the comment right before it must start with "
                      f"one of {', '.join(ROLE_TAGS)} (the header is the manual)")
    for name, tagged in decls:
        if not tagged:
            errors.append(f"{header_path}: '{name}' is declared without FL_API: it would not be exported")
        if not name.startswith("fl_"):
            errors.append(f"{header_path}: '{name}' does not start with fl_: the version script would hide it")
    header_names = sorted({n for n, _ in decls})
    dups = sorted({n for n, _ in decls if [d for d, _ in decls].count(n) > 1})
    for n in dups:
        errors.append(f"{header_path}: '{n}' is declared more than once")
    if list_path == "--print":
        print("\n".join(header_names))
        return 0

    with open(list_path, encoding="utf-8") as f:
        listed = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    if listed != sorted(listed, key=lambda s: s.encode()):
        errors.append(f"{list_path}: not sorted (C locale); regenerate with: {argv[0]} {header_path} --print")
    if len(set(listed)) != len(listed):
        errors.append(f"{list_path}: has duplicate lines")
    missing = sorted(set(header_names) - set(listed))
    extra = sorted(set(listed) - set(header_names))
    for n in missing:
        errors.append(f"+ {n}    (declared FL_API in the header, missing from {list_path})")
    for n in extra:
        errors.append(f"- {n}    (in {list_path}, not declared in the header)")

    if errors:
        print("header/export-list mismatch:", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        print(f"If the header change is intended, update the list: {argv[0]} {header_path} --print > {list_path}",
              file=sys.stderr)
        return 1
    print(f"OK: {len(header_names)} FL_API functions in {header_path} match {list_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
