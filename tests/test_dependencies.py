"""One source of dependencies: every import is declared, runtime and development apart.

pyproject.toml declares what the portal runs on ([project.dependencies], the 'ldap' extra) and
what its development needs (the 'dev' extra); requirements.in and requirements-dev.in mirror
them, and ``make lock`` pins them into requirements.lock (the runtime: all the image installs)
and requirements-dev.lock (what make venv adds, within the runtime's pins)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shlex
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The distributions beside the portal in this repository (installed from their folders).
LOCAL = {"gpu_spec": "gpu-spec", "gpu_node_agent": "gpu-node-agent"}
# The portal's own packages: the apps and the settings (what the image runs).
APPS = sorted(
    p.name
    for p in ROOT.iterdir()
    if (p / "__init__.py").exists() and p.name not in {"tests", "devcluster", "bench"}
)
# bench/'s scripts import each other by their file names.
FIRST_PARTY = {*APPS, "devcluster", "tests", "bench", "manage"} | {
    p.stem for p in (ROOT / "bench").glob("*.py")
}
# Imported where the optional extra is installed only (LDAP=no leaves it out of the venv).
NOT_ALWAYS_INSTALLED = {"ldap": "python-ldap", "django_auth_ldap": "django-auth-ldap"}
DEV_TOOLS = {"pytest", "pytest-django", "playwright", "locust", "mypy", "ruff", "import-linter"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return canonical(match.group(1))


def declared(*groups: str) -> set[str]:
    project = PYPROJECT["project"]
    names: set[str] = set()
    for group in groups:
        entries = (
            project["dependencies"]
            if group == "runtime"
            else project["optional-dependencies"][group]
        )
        names |= {requirement_name(r) for r in entries}
    return names


def pins(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    found = {}
    for line in lines:
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not an exact pin"
            found[canonical(name)] = version
    return found


def requirements_in(path: Path) -> list[str]:
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-c ", "-r "))
    ]


def python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        path = ROOT / folder
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*.py")):
            if not {".venv", "node_modules"} & set(file.parts):
                yield file


def imported_modules(files: Iterable[Path]) -> dict[str, str]:
    """Top-level module -> the first file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(file.relative_to(ROOT)))
    return found


def undeclared(modules: dict[str, str], allowed: set[str]) -> list[str]:
    installed = importlib.metadata.packages_distributions()
    problems = []
    for module, where in sorted(modules.items()):
        if module in sys.stdlib_module_names or module in FIRST_PARTY:
            continue
        if module in LOCAL:
            dists = {LOCAL[module]}
        elif module in NOT_ALWAYS_INSTALLED:
            dists = {NOT_ALWAYS_INSTALLED[module]}
        else:
            dists = {canonical(d) for d in installed.get(module, [])}
        if not dists & allowed:
            problems.append(f"{module} (imported by {where}; from {sorted(dists) or 'nothing'})")
    return problems


def test_every_import_of_the_portal_is_a_declared_runtime_dependency():
    modules = imported_modules(python_files(*APPS, "manage.py"))
    assert "markdown_it" in modules and "kombu" in modules  # the scan sees lazy imports too
    assert undeclared(modules, declared("runtime", "ldap")) == []


def test_every_import_of_the_tests_and_tools_is_declared():
    modules = imported_modules(python_files("tests", "bench", "devcluster"))
    allowed = declared("runtime", "ldap", "dev")
    assert undeclared(modules, allowed) == []


def test_the_requirements_files_mirror_pyproject():
    project = PYPROJECT["project"]
    runtime = [r for r in project["dependencies"] if requirement_name(r) not in LOCAL.values()]
    runtime += project["optional-dependencies"]["ldap"]
    dev = [
        r
        for r in project["optional-dependencies"]["dev"]
        if requirement_name(r) not in LOCAL.values()
    ]
    normal = lambda rs: sorted(r.replace(" ", "") for r in rs)  # noqa: E731
    assert normal(requirements_in(ROOT / "requirements.in")) == normal(runtime)
    assert normal(requirements_in(ROOT / "requirements-dev.in")) == normal(dev)
    assert "-c requirements.lock" in (ROOT / "requirements-dev.in").read_text().splitlines()


def test_the_runtime_lock_holds_no_development_tool():
    runtime = pins(ROOT / "requirements.lock")
    dev = pins(ROOT / "requirements-dev.lock")
    ldap = pins(ROOT / "requirements-ldap.lock")
    assert not DEV_TOOLS & set(runtime), DEV_TOOLS & set(runtime)
    assert set(dev) >= DEV_TOOLS
    assert not set(runtime) & set(dev), "a package pinned twice"
    assert set(ldap) == {"django-auth-ldap", "python-ldap"}
    assert not set(ldap) & (set(runtime) | set(dev))
    # Every runtime dependency is pinned in the runtime lock, the dev extra in either.
    assert declared("runtime") - set(LOCAL.values()) <= set(runtime)
    assert declared("dev") - set(LOCAL.values()) <= set(runtime) | set(dev)


def test_the_image_installs_the_runtime_lock_only():
    # The image is the last stage; the documentation stage before it only hands over site/.
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ").rsplit("\nFROM ", 1)[1]
    installs = [
        shlex.split(command.strip())
        for line in text.splitlines()
        for command in line.split("&&")
        if re.match(r"\s*(RUN\s+)?pip install", command)
    ]
    assert installs
    sources = {word for words in installs for word in words if not word.startswith("-")}
    sources -= {"RUN", "pip", "install"}
    assert sources == {"requirements.lock", "requirements-ldap.lock", "./gpu_spec"}
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "requirements-dev" in line]
