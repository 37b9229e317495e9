"""config/ is a shared layer below the task packages: they import it (``shared``, ``SHARED``), it
imports none of them; the schema is gathered from the task registry when a config is first loaded."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import fedstream
from fedstream.config.schema import KEYS_BY_TASK, SCHEMA, schema
from fedstream.tasks import TASKS

CONFIG = Path(__file__).resolve().parents[1] / "src" / "fedstream" / "config"
ABOVE = ("fedstream.ovfl", "fedstream.vfl", "fedstream.chfl", "fedstream.tasks")


def imported(path: Path) -> list[str]:
    """Every module an import statement of ``path`` names (function-local ones included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_config_imports_nothing_from_the_task_packages():
    files = sorted(CONFIG.rglob("*.py"))
    assert {p.name for p in files} >= {"__init__.py", "loader.py", "schema.py"}
    found = [f"{p.relative_to(CONFIG)}: {n}" for p in files for n in imported(p)
             if n == "fedstream" or any(n == a or n.startswith(a + ".") for a in ABOVE)]
    assert found == []


def test_importing_config_loads_no_task_package():
    code = ("import sys, fedstream.config; print(sorted(m for m in sys.modules if m.startswith("
            f"{ABOVE!r})))")
    env = os.environ | {"PYTHONPATH": str(Path(fedstream.__file__).parents[1])}  # this fedstream
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_schema_is_the_registrys_tasks_keys():
    assert list(schema().keys_by_task) == list(TASKS) == list(KEYS_BY_TASK)
    for name, task in TASKS.items():
        assert schema().checks[name] is task.check
        assert schema().datasets_by_task[name] == task.datasets
        assert all(name in SCHEMA[key].tasks for key in task.fields)
    assert SCHEMA["task"].choices == tuple(TASKS)


def test_modules_found_by_name_are_the_declared_plugin_points():
    """A module loaded by name (``import_module``) is a link the import graph does not show; each one is
    a declared plugin point: the schema's registry, a Task's entry points, a task's deploy adapter,
    the packages' lazy exports and a user's own model factories (``model.client`` / ``model.server``).
    A new one must be added here on purpose."""
    src = CONFIG.parent
    found = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if "import_module(" in p.read_text())
    assert found == ["config/schema.py", "deploy/adapters.py", "lazy.py", "own_models.py", "runs/task.py"]
