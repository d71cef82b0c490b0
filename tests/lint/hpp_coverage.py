#!/usr/bin/env python3
"""Every function of the C header has its C++ wrapper: flowlane.hpp names every FL_API
function of flowlane.h, except the deprecated names (their replacements are wrapped).
Fails listing the functions a C++ user would have to reach through the C API."""
import argparse
import pathlib
import re
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    root = pathlib.Path(ap.parse_args().root)
    inc = root / "capi" / "include" / "flowlane"
    header = (inc / "flowlane.h").read_text()
    wrapper = (inc / "flowlane.hpp").read_text()
    decls = re.findall(r"FL_API\b([^;]*?)\b(fl_[a-z0-9_]+)\s*\(", header, re.S)
    deprecated = {name for prefix, name in decls if "FL_DEPRECATED" in prefix}
    names = sorted({name for _, name in decls} - deprecated)
    missing = [n for n in names if not re.search(r"\b%s\b" % n, wrapper)]
    if len(names) < 40:
        print("hpp_coverage: found only %d functions in flowlane.h: the pattern is stale" % len(names))
        return 1
    if missing:
        print("flowlane.hpp does not wrap these flowlane.h functions:\n  " + "\n  ".join(missing))
        return 1
    print("flowlane.hpp wraps all %d functions of flowlane.h (%d deprecated names skipped)" % (len(names), len(deprecated)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
