"""The layout a maintainer relies on, beyond what the import contracts of ``make lint`` check
(import-linter sees modules, not names): no app imports another app's private names, and no
module below the top floor reaches the project package ``portal``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = (
    "core", "tenants", "identity", "quotas", "gpu_agent", "approvals", "usage", "alerts",
    "advice", "dashboards", "portal", "devcluster",
)  # fmt: skip


def _modules() -> list[tuple[str, Path]]:
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                found.append((app, path))
    return found


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, []) for a in node.names)
    return out


def test_no_app_imports_another_apps_private_names():
    crossings = [
        f"{path.relative_to(ROOT)}:{line} imports {name} from {module}"
        for app, path in _modules()
        for line, module, names in _imports(path)
        if module.split(".")[0] in APPS and module.split(".")[0] != app
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert crossings == []


# The project package may be imported by itself and by nothing else: settings, the root URL
# conf and the WSGI entry point live in it.
@pytest.mark.parametrize("app", [a for a in APPS if a != "portal"])
def test_only_the_project_package_imports_portal(app):
    reaching_up = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for owner, path in _modules()
        if owner == app
        for line, module, _ in _imports(path)
        if module.split(".")[0] == "portal"
    ]
    assert reaching_up == []
