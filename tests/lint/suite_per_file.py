#!/usr/bin/env python3
"""The C API tests keep one suite per file (tests/README.md): every GoogleTest suite of
tests/capi/ is defined in exactly one file, and tests/README.md names every file there.
Fails listing a suite spread over files, or a file the README's list leaves out.
--self-test: the checker finds a spread suite and a missing file in built-in cases."""
import argparse
import pathlib
import re
import sys

SUITE = re.compile(r"^TEST(?:_F|_P)?\(\s*([A-Za-z0-9_]+)\s*,", re.M)


def problems(files: dict, readme: str) -> list:
    """files: name -> text of each tests/capi file; readme: tests/README.md."""
    where: dict = {}
    for name, text in sorted(files.items()):
        for suite in set(SUITE.findall(text)):
            where.setdefault(suite, []).append(name)
    out = ["suite %s is defined in %d files: %s" % (s, len(f), ", ".join(f)) for s, f in sorted(where.items()) if len(f) > 1]
    out += ["tests/README.md does not list capi/%s" % n for n in sorted(files)
            if not re.search(r"(?<![A-Za-z0-9_])%s" % re.escape(n), readme)]
    return out


def self_test() -> int:
    files = {"test_a.cpp": "TEST(Alpha, One) {}\nTEST_F(Beta, Two) {}\n", "test_b.cpp": "TEST(Alpha, Three) {}\n"}
    got = problems(files, "- `test_a.cpp`: a; `capi/my_test_b.cpp`\n")
    want = ["suite Alpha is defined in 2 files: test_a.cpp, test_b.cpp", "tests/README.md does not list capi/test_b.cpp"]
    if got != want:
        print("suite_per_file self-test: got %r, want %r" % (got, want))
        return 1
    if problems({"test_a.cpp": "TEST(Alpha, One) {}\n// TEST(Alpha, Two)\n"}, "`test_a.cpp`"):
        print("suite_per_file self-test: a commented-out TEST counted")
        return 1
    print("suite_per_file self-test: ok")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    root = pathlib.Path(args.root)
    capi = root / "tests" / "capi"
    files = {p.name: p.read_text() for p in capi.iterdir() if p.suffix in (".cpp", ".hpp")}
    if len(files) < 20:
        print("suite_per_file: found only %d files in %s: the path is stale" % (len(files), capi))
        return 1
    found = problems(files, (root / "tests" / "README.md").read_text())
    if found:
        print("\n".join(found))
        return 1
    print("suite_per_file: %d files, each suite in one file, all listed in tests/README.md" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
