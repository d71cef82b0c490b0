"""The package's own structure: its modules import each other without a cycle (at import
time or inside functions; imports for type checkers only are not counted), each module
stays one concern of a readable size, and the communicator, which the host backend runs
without a GPU, has its own module and is still importable from where it used to be."""

import ast
import os
import unittest

from _support import _PKG_ROOT, flowlane

_PKG_DIR = os.path.join(_PKG_ROOT, "flowlane")
_GENERATED = {"_capi"}  # written by scripts/gen_bindings.py from the header


def _modules():
    return sorted(f[:-3] for f in os.listdir(_PKG_DIR) if f.endswith(".py"))


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(module):
    """The package modules `module` imports when it runs (anywhere in the file, functions
    included), leaving out `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(open(os.path.join(_PKG_DIR, module + ".py")).read())
    found = set()

    def visit(node):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # from . import a, b
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flowlane"):
            parts = node.module.split(".")
            found.update(parts[1:2] or [a.name for a in node.names])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in _modules() and m != module}


class PackageStructure(unittest.TestCase):
    def test_no_import_cycle(self):
        graph = {m: _runtime_imports(m) for m in _modules()}
        state = {}
        cycles = []

        def walk(m, path):
            state[m] = "open"
            for dep in sorted(graph[m]):
                if state.get(dep) == "open":
                    cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
                elif dep not in state:
                    walk(dep, path + [dep])
            state[m] = "done"

        for m in sorted(graph):
            if m not in state:
                walk(m, [m])
        self.assertEqual(cycles, [], "import cycles among the package's modules")

    def test_modules_stay_readable(self):
        for m in _modules():
            if m in _GENERATED:
                continue
            with open(os.path.join(_PKG_DIR, m + ".py")) as f:
                n = sum(1 for _ in f)
            self.assertLessEqual(n, 600, "%s.py has %d lines: split it by concern" % (m, n))

    def test_comm_has_its_own_module_and_keeps_its_old_names(self):
        from flowlane import comm, gpu

        for name in comm.__all__:
            self.assertIs(getattr(gpu, name), getattr(comm, name), name)
            self.assertIs(getattr(flowlane, name), getattr(comm, name), name)
        self.assertEqual(flowlane.Comm.__module__, "flowlane.comm")
        self.assertIn("Comm", gpu.__all__)


if __name__ == "__main__":
    unittest.main()
