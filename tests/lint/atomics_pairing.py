#!/usr/bin/env python3
"""Lint: every non-relaxed atomic ordering says what it pairs with.

Each use of std::memory_order_{acquire,release,acq_rel,seq_cst,consume} (or the C++20
spelling std::memory_order::acquire, ...) in the library sources must have a comment that
names the other side of the synchronisation: on a line of the statement that holds it, or
on one of the 3 lines above that statement's first line (preprocessor lines are not
counted), up to the nearest code line that does no atomic operation (a comment above other
code is about that code; one above a run of atomic statements may explain them together).
A comment counts when it says "pairs"/"paired"/"pairing", "Dekker", "store-load"
(or "store->load", "store–load", "store/load"), or "see ... above" (a per-line reference to
a block comment that explains a group). Calls of the helpers in FENCE_WRAPPERS (seq_cst
fences under another name) need such a comment too.

Uses are found in code only (comments and string literals are skipped), anywhere in a
statement that may span several lines, including default arguments such as
`load_state(std::memory_order mo = std::memory_order_acquire)`.

Usage: atomics_pairing.py [--root REPO] [PATH ...]   (default: ROOTS less SKIPPED_ROOTS)
       atomics_pairing.py --self-test
Exit status: 0 when every use is explained, 1 when some are not (each listed as
path:line: ordering: code), 2 on a path that does not exist.
"""
import argparse
import pathlib
import re
import sys

ROOTS = ["core", "capi/src", "gpu", "comm"]
# Folders of ROOTS left out (none).
SKIPPED_ROOTS: list = []
SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".cu", ".cuh"}
LINES_ABOVE = 3
# Helpers that are a seq_cst fence (core/base/cpu.hpp): each call needs the comment too.
FENCE_WRAPPERS = ["full_fence"]

ORDER = re.compile(r"\bmemory_order(?:_|::)(acquire|release|acq_rel|seq_cst|consume)\b")
FENCE_CALL = re.compile(r"(?<!void )\b(%s)\s*\(\s*\)" % "|".join(FENCE_WRAPPERS))
# Code lines that a comment may explain together with the statement below them.
ATOMIC_LINE = re.compile(r"\bmemory_order|\b(?:%s)\s*\(\s*\)" % "|".join(FENCE_WRAPPERS))
REASON = re.compile(r"\bpair(?:s|ed|ing)?\b|\bdekker\b|\bstore\s*(?:-|–|—|->|→|/|to)\s*load\b|\bsee\b.*\babove\b",
                    re.IGNORECASE)


def split_code_comments(text):
    """Return (code_lines, comment_lines): per source line, the code with comments and
    literals blanked, and the text of the comments that lie on that line."""
    code, comments = [[]], [[]]
    i, n = 0, len(text)
    state = None  # None, "line", "block"

    def put(dst, ch):
        if ch == "\n":
            code.append([])
            comments.append([])
        else:
            dst[-1].append(ch)

    while i < n:
        c = text[i]
        if state == "line":
            if c == "\n":
                state = None
                put(code, c)
            else:
                put(comments, c)
            i += 1
        elif state == "block":
            if text.startswith("*/", i):
                state = None
                i += 2
                comments[-1].append(" ")
            else:
                put(comments, c)
                i += 1
        elif text.startswith("//", i):
            state, i = "line", i + 2
        elif text.startswith("/*", i):
            state, i = "block", i + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
                                                       or text[i - 1] in "8uUL"):
            m = re.compile(r'R"([^()\\\s]{0,16})\(').match(text, i)
            if not m:
                put(code, c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            for ch in text[i:end]:
                put(code, "\n" if ch == "\n" else " ")
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            put(code, " ")
            i = j + 1 if j < n and text[j] == c else j
        elif c.isdigit() and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            # A pp-number, which may hold digit separators (50'000) that are not char literals.
            m = re.compile(r"[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*").match(text, i)
            for ch in m.group(0):
                put(code, ch)
            i = m.end()
        else:
            put(code, c)
            i += 1
    return ["".join(x) for x in code], ["".join(x) for x in comments]


def statement_bounds(code, line, col):
    """First and last line (0-based) of the statement around code[line][col]: from the first
    code after the previous ';', '{' or '}' (or preprocessor line) to the next one."""
    start, start_col = 0, 0
    ln, upto = line, col
    while ln >= 0:
        text = code[ln][:upto]
        if text.lstrip().startswith("#") and ln != line:
            start, start_col = ln + 1, 0
            break
        cut = max(text.rfind(ch) for ch in ";{}")
        if cut >= 0:
            start, start_col = ln, cut + 1
            break
        ln -= 1
        upto = None
    # Skip blank space after the terminator: the statement starts at its first code.
    while start < line and not code[start][start_col:].strip():
        start, start_col = start + 1, 0
    end = line
    rest = code[line][col:]
    while not any(ch in rest for ch in ";{}") and end + 1 < len(code):
        if code[end].lstrip().startswith("#"):
            break
        end += 1
        rest = code[end]
    return start, end


def check_text(text):
    """Yield (line_number, what) for each unexplained non-relaxed ordering or fence call."""
    code, comments = split_code_comments(text)
    for ln, src in enumerate(code):
        uses = [(m.start(), m.group(0)) for m in ORDER.finditer(src)]
        uses += [(m.start(), m.group(1) + "()") for m in FENCE_CALL.finditer(src)]
        for col, what in sorted(uses):
            start, end = statement_bounds(code, ln, col)
            # The statement's lines, and the LINES_ABOVE lines above it; preprocessor lines
            # (a #pragma around a definition) are not counted.
            above, k = [], start - 1
            while k >= 0 and len(above) < LINES_ABOVE:
                line = code[k].strip()
                if line and not line.startswith("#") and not ATOMIC_LINE.search(line):
                    break  # other code: its comments are about it
                if not line.startswith("#"):
                    above.append(k)
                k -= 1
            window = " ".join(comments[j] for j in above + list(range(start, end + 1)))
            if not REASON.search(window):
                yield ln + 1, what


def files_under(root, paths):
    for p in paths:
        full = root / p
        if full.is_file():
            yield full
        elif full.is_dir():
            for f in sorted(full.rglob("*")):
                if f.is_file() and f.suffix in SUFFIXES:
                    yield f
        else:
            raise FileNotFoundError(f"{full} does not exist")


def run(root, paths):
    missing = []
    count = 0
    for f in files_under(root, paths):
        text = f.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        for ln, order in check_text(text):
            missing.append(f"{f.relative_to(root)}:{ln}: {order}: {lines[ln - 1].strip()}")
        count += sum(len(ORDER.findall(c)) + len(FENCE_CALL.findall(c)) for c in split_code_comments(text)[0])
    return missing, count


SELF_TESTS = [
    # (source, expected unexplained line numbers)
    ("x.store(1, std::memory_order_release);\n", [1]),
    ("x.store(1, std::memory_order_release);  // pairs with the acquire load in get()\n", []),
    ("// release: pairs with get()\n\n\nx.store(1, std::memory_order_release);\n", []),
    ("// release: pairs with get()\n\n\n\nx.store(1, std::memory_order_release);\n", [5]),
    ("x.load(std::memory_order_relaxed);\n", []),
    ("x.load(std::memory_order::acquire);\n", [1]),
    ("std::atomic_thread_fence(std::memory_order_seq_cst);  // store-load with the fence in steal()\n", []),
    ("// Dekker with the sleeper's flag\nstd::atomic_thread_fence(std::memory_order_seq_cst);\n", []),
    ("a.fetch_add(1, std::memory_order_acq_rel);  // see the protocol above\n", []),
    # A multi-line statement: the comment may sit on any of its lines or 3 lines above its first.
    ("if (s.compare_exchange_weak(e, d,\n      std::memory_order_release,\n      std::memory_order_relaxed))  // pairs with wait()\n  f();\n", []),
    ("// pairs with wait()\n\n\nif (s.compare_exchange_weak(e, d,\n\n\n\n      std::memory_order_release,\n      std::memory_order_relaxed))\n  f();\n", []),
    ("int y;\n\n\n\nif (s.compare_exchange_weak(e, d,\n\n\n      std::memory_order_release, std::memory_order_relaxed))\n  f();\n", [8]),
    # Default-argument orderings need a comment too.
    ("State load_state(std::memory_order mo = std::memory_order_acquire) const {\n  return s.load(mo);\n}\n", [1]),
    ("// acquire by default: pairs with the release store in set_state()\nState load_state(std::memory_order mo = std::memory_order_acquire) const;\n", []),
    # Mentions in comments and strings are not uses; the word must be in a comment.
    ("// std::memory_order_release is used below\nint a;\n", []),
    ('const char* s = "memory_order_acquire pairs";\n', []),
    ('f("pairs"); x.load(std::memory_order_acquire);\n', [1]),
    ("/* pairs with\n   the release store in put() */ x.load(std::memory_order_acquire);\n", []),
    # Digit separators are not char literals.
    ("int k = 50'000; x.load(std::memory_order_acquire);\nint j = 1;  // pairs\n", [1]),
    # A comment on an earlier statement's line, more than 3 lines above, does not count.
    ("a();  // pairs with b()\n\n\n\nx.load(std::memory_order_acquire);\n", [5]),
    # "see ... above" counts; "see below" alone does not.
    ("x.load(std::memory_order_acquire);  // see below\n", [1]),
    ("x.load(std::memory_order_acquire);  // acquire: see the protocol above\n", []),
    # Spellings of store-load.
    ("// a store–load pattern with get()\nx.store(1, std::memory_order_seq_cst);\n", []),
    ("// store->load with get()\nx.store(1, std::memory_order_seq_cst);\n", []),
    ("// stored, then loaded\nx.store(1, std::memory_order_seq_cst);\n", [2]),
    # A fence wrapper's calls need the comment; its definition is the memory_order use.
    ("inline void full_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }  // Dekker\n", []),
    ("x.store(1, std::memory_order_relaxed);\nfull_fence();\n", [2]),
    ("x.store(1, std::memory_order_relaxed);\nfull_fence();  // store-load pair with pop()\n", []),
    # Preprocessor lines between the comment and the statement are not counted.
    ("// pairs with get()\n#if A\n#pragma x\n#pragma y\n#endif\nx.load(std::memory_order_acquire);\n", []),
    # A comment above other code, or on the line of other code, is about that code.
    ("// pairs with get()\nint a = 1;\nx.load(std::memory_order_acquire);\n", [3]),
    ("f();  // pairs with g()\nx.load(std::memory_order_acquire);\n", [2]),
    ("// pairs with get()\nint v = a.load(std::memory_order_relaxed);\na.store(v, std::memory_order_release);\n", []),
    # Each statement of a group needs a comment within reach; a for statement's parts count.
    ("// pairs with put()\nfor (Node* q = h.load(std::memory_order_acquire); q != nullptr;\n     q = q->next.load(std::memory_order_acquire)) {\n}\n", []),
    ("// pairs with put()\n\n\na.load(std::memory_order_acquire);\nb.load(std::memory_order_acquire);\n", [5]),
]


def self_test():
    failures = 0
    for src, want in SELF_TESTS:
        got = sorted({ln for ln, _ in check_text(src)})
        if got != want:
            failures += 1
            print(f"self-test FAILED: expected unexplained lines {want}, got {got} for:\n{src}")
    print(f"atomics_pairing self-test: {len(SELF_TESTS) - failures}/{len(SELF_TESTS)} cases pass")
    return 1 if failures else 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parents[2]),
                    help="repository root (default: two folders above this script)")
    ap.add_argument("--self-test", action="store_true", help="check the checker on built-in cases")
    ap.add_argument("paths", nargs="*", help="files or folders relative to the root (default: %s)"
                    % ", ".join(r for r in ROOTS if r not in SKIPPED_ROOTS))
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    root = pathlib.Path(args.root)
    paths = args.paths or [r for r in ROOTS if r not in SKIPPED_ROOTS]
    try:
        missing, count = run(root, paths)
    except FileNotFoundError as e:
        print(f"atomics_pairing: {e}", file=sys.stderr)
        return 2
    if missing:
        print(f"{len(missing)} of {count} non-relaxed memory orderings and fence calls in {', '.join(paths)} do not say what "
              f"they pair with.\nAdd a comment on the statement or within {LINES_ABOVE} lines above it that "
              f"names the other side (\"release: pairs with the acquire load of x_ in Foo::bar()\") or the "
              f"store-load (Dekker) pattern a seq_cst ordering is for:")
        print("\n".join(missing))
        return 1
    print(f"atomics_pairing: all {count} non-relaxed memory orderings and fence calls in {', '.join(paths)} say what they pair with")
    skipped = [r for r in SKIPPED_ROOTS if not args.paths]
    if skipped:
        print(f"(not checked yet: {', '.join(skipped)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
