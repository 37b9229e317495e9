"""No module of src reaches into another object's private attributes (``obj._x`` where obj is not
``self`` or ``cls``): what one class needs of another goes through a public accessor."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fedstream"
# public API that happens to start with an underscore: namedtuple methods, os._exit, and PyTorch's
# int8 GEMM torch._int_mm (a library operator, not another object's state; used by the VF-PS engine)
ALLOWED = {"_replace", "_asdict", "_fields", "_make", "_exit", "_int_mm"}


def private_reaches(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, expression) of every ``x._name`` whose ``x`` is not ``self`` / ``cls`` (dunders and
    :data:`ALLOWED` aside)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if node.attr in ALLOWED:
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_check_sees_a_reach_and_lets_self_through():
    code = "def f(self, other):\n    return self._a + other._b + p._replace(x=1).y\n"
    assert private_reaches(ast.parse(code)) == [(2, "other._b")]


def test_src_reaches_into_no_other_objects_private_attributes():
    found = [f"{path.relative_to(SRC)}:{line}: {expr}" for path in sorted(SRC.rglob("*.py"))
             if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))  # generated (scripts/protocol.sh)
             for line, expr in private_reaches(ast.parse(path.read_text()))]
    assert found == []
