#!/usr/bin/env python3
"""Checks the repository's READMEs against the code (ctest label `docs`).

    check_readmes.py ROOT tables      every file table lists every file of its folder
    check_readmes.py ROOT citations   every README section a source cites exists
    check_readmes.py ROOT commands    every shell block of README.md names what runs it

tables: a README.md whose Markdown table has `file` as its first column header must list,
in that column, every file of the README's own folder (subfolders and the READMEs
themselves excepted); an entry with a slash names a file of a subfolder and must exist. A cell names files as `name.ext`, several as `a.hpp`, `b.cpp`, or
with braces: `pool.{hpp,cpp}`. A listed file that does not exist is an error too.

citations: a comment or doc that cites `some/dir/README.md, "Section"` must find a heading
`## Section` (any level) in that README.

commands: every fenced ```sh block of the top-level README.md is preceded by a marker
`<!-- tested: WHO -->` saying what runs its commands, so that no command there goes
untested: WHO is `abi.consumer` (tests/consumer/run.cmake runs the block as written, in a
scratch directory, against a scratch install prefix in place of the README's one; it
reads these markers) or the path of a script of the repository that runs the block's
commands (`scripts/test.sh`, which CI runs).

Standard library only; exit status 1 with one line per problem.
"""
import os
import re
import subprocess
import sys

SKIP_DIRS = {".git", "build", "target", "node_modules", "__pycache__"}
SELF = "tests/docs/check_readmes.py"  # its docstring shows the citation form
SOURCE_EXT = (".c", ".h", ".cpp", ".hpp", ".cu", ".py", ".rs", ".sh", ".cmake", ".txt", ".md")


def tracked_files(root):
    """The repository's files (git ls-files when available, else a walk)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                             check=True, capture_output=True, text=True).stdout
        return sorted({p for p in out.splitlines() if os.path.isfile(os.path.join(root, p))})
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")]
            found += [os.path.relpath(os.path.join(d, f), root) for f in files]
        return sorted(found)


def expand(token):
    """`pool.{hpp,cpp}` -> [pool.hpp, pool.cpp]."""
    m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", token)
    if not m:
        return [token]
    return [m.group(1) + alt.strip() + m.group(3) for alt in m.group(2).split(",")]


def file_tables(text):
    """Yields the set of names listed in the first column of every `| file | ... |` table."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        if lines[i].lstrip().startswith("|") and cells and cells[0].lower() == "file":
            names = set()
            i += 2  # the header and the |---| row
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                first = lines[i].strip().strip("|").split("|")[0]
                for token in re.findall(r"`([^`]+)`", first):
                    names.update(expand(token))
                i += 1
            yield names
        else:
            i += 1


def check_tables(root, files):
    errors = []
    readmes = [p for p in files if os.path.basename(p) == "README.md"]
    for readme in readmes:
        folder = os.path.dirname(readme)
        with open(os.path.join(root, readme), encoding="utf-8") as f:
            tables = list(file_tables(f.read()))
        if not tables:
            continue
        listed = set().union(*tables)
        here = {os.path.basename(p) for p in files
                if os.path.dirname(p) == folder and not os.path.basename(p).startswith("README")}
        for name in sorted(here - listed):
            errors.append(f"{readme}: its file table does not list {name}")
        for name in sorted(listed - here):
            if "/" in name and os.path.isfile(os.path.join(root, folder, name)):
                continue  # a file of a subfolder, named by its path
            errors.append(f"{readme}: its file table lists {name}, which is not a file of {folder or '.'}/")
    return errors


def check_citations(root, files):
    errors = []
    headings = {}
    cite = re.compile(r'([A-Za-z0-9_./-]*README[A-Za-z0-9_.-]*\.md), "([^"]+)"')
    for path in files:
        if not path.endswith(SOURCE_EXT) or path.startswith("bench/results/") or path == SELF:
            continue
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for m in cite.finditer(text):
            target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
            if not os.path.isfile(os.path.join(root, target)):
                target = os.path.normpath(m.group(1))  # cited from the repository root
            full = os.path.join(root, target)
            if not os.path.isfile(full):
                errors.append(f"{path}: cites {m.group(1)}, which does not exist")
                continue
            if target not in headings:
                with open(full, encoding="utf-8") as f:
                    headings[target] = {h.strip() for h in re.findall(r"^#+\s+(.*)$", f.read(), flags=re.M)}
            # A citation may wrap onto the next comment line: "Lanes\n// as strands".
            section = re.sub(r"\s*\n\s*(?://+!?|#+|\*)?\s*", " ", m.group(2))
            if not any(h == section or h.startswith(section + " (") for h in headings[target]):
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{path}:{line}: cites section \"{section}\" of {target}, which has no such heading")
    return errors


MARKER = re.compile(r"^<!-- tested: (\S+)(?: .*)? -->$")


def check_commands(root, files):
    """Every ```sh block of README.md has a `<!-- tested: WHO -->` marker right above it."""
    errors = []
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "```sh":
            continue
        above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        m = MARKER.match(above)
        if not m:
            errors.append(f"README.md:{i + 1}: a shell block without a `<!-- tested: WHO -->` marker above it")
        elif m.group(1) != "abi.consumer" and m.group(1) not in files:
            errors.append(f"README.md:{i + 1}: the marker names {m.group(1)}, which is neither abi.consumer nor "
                          "a file of the repository")
    return errors


def main(argv):
    if len(argv) != 3 or argv[2] not in ("tables", "citations", "commands"):
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    files = tracked_files(root)
    check = {"tables": check_tables, "citations": check_citations, "commands": check_commands}[argv[2]]
    errors = check(root, files)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print(f"OK: {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
