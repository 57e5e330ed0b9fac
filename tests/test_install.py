"""Installable beside itwinai: declared dependencies, tested lower bounds, pip's resolution."""

from __future__ import annotations

import ast
import email
import importlib.metadata
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
REQUIREMENTS = {canonicalize_name(r.name): r for r in map(Requirement, PROJECT["dependencies"])}
EXTRAS = ("postgres", "fast")  # optional parts users install; "test" and "dev" are ours
OPTIONAL = {
    canonicalize_name(r.name): r
    for extra in EXTRAS
    for r in map(Requirement, PROJECT["optional-dependencies"][extra])
}
ITWINAI_PINS = {"click": "8.1.8", "numpy": "1.26.4"}  # itwinai 0.4.2: click==8.1.8, numpy<2


def min_pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints" / "min.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def imported_top_level_modules() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "itwin_report").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"itwin_report", "__future__"}


def test_every_imported_package_is_declared() -> None:
    distributions = importlib.metadata.packages_distributions()
    modules = imported_top_level_modules()
    assert {"click", "mlflow", "pandas", "numpy", "yaml", "requests"} <= modules
    for module in modules:
        provided = {canonicalize_name(d) for d in distributions.get(module, [])}
        declared = provided & (set(REQUIREMENTS) | set(OPTIONAL))
        assert declared, f"{module} is imported but no dependency or extra provides it"


def test_lower_bounds_are_the_tested_minimum() -> None:
    pins = min_pins()
    fast = {
        canonicalize_name(r.name): r
        for r in map(Requirement, PROJECT["optional-dependencies"]["fast"])
    }
    for name, requirement in {**REQUIREMENTS, **fast}.items():
        assert name in pins, f"{name} has no tested minimum in constraints/min.txt"
        bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert len(bounds) == 1, f"{name} needs one lower bound"
        assert pins[name] in requirement.specifier  # the tested version is allowed...
        # ...and is the bound itself (the bound may omit trailing parts: 1.26 for 1.26.4)
        assert pins[name].release[: len(bounds[0].release)] == bounds[0].release, name


def test_itwinai_pins_are_inside_the_ranges() -> None:
    for name, version in ITWINAI_PINS.items():
        assert Version(version) in REQUIREMENTS[name].specifier, name
    # itwinai 0.4.2 asks for mlflow>=2.17.2, matplotlib>=3.9.2, rich>=13.5.3, pyyaml>=6.0.2
    for name, version in {"mlflow": "2.17.2", "matplotlib": "3.9.2"}.items():
        assert Version(version) in REQUIREMENTS[name].specifier, name
    # rich: our lower bound (15.0, the first whose tables keep headers whole) is one itwinai takes
    ours = min(s.version for s in REQUIREMENTS["rich"].specifier if s.operator == ">=")
    assert Version(ours) >= Version("13.5.3")


def itwinai_requirements(folder: Path) -> list[Requirement]:
    """itwinai 0.4.2's own requirements (no extras), read from its wheel's metadata."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--only-binary", ":all:", "-d", str(folder), "itwinai==0.4.2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = folder.glob("itwinai-0.4.2-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(name))
    requirements = [Requirement(text) for text in metadata.get_all("Requires-Dist", [])]
    return [r for r in requirements if r.marker is None]


@pytest.mark.registry
def test_pip_resolves_the_project_with_itwinai(tmp_path: Path) -> None:
    """pip's resolver, installing nothing: the project with itwinai 0.4.2's requirements.

    Its requirements on packages the project also needs are resolved together with the
    project (resolving all of itwinai, ray and torch included, takes minutes).
    """
    shared = [
        r for r in itwinai_requirements(tmp_path) if canonicalize_name(r.name) in REQUIREMENTS
    ]
    assert {canonicalize_name(r.name) for r in shared} >= {"click", "numpy", "mlflow"}
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--quiet", "--report", str(report), str(ROOT), *map(str, shared)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = {
        canonicalize_name(item["metadata"]["name"]): Version(item["metadata"]["version"])
        for item in json.loads(report.read_text(encoding="utf-8"))["install"]
    }
    assert chosen[canonicalize_name("itwin-report")] == Version(PROJECT["version"])
    for requirement in shared:  # every itwinai requirement holds in the resolved set
        assert chosen[canonicalize_name(requirement.name)] in requirement.specifier, requirement
    assert chosen["click"] == Version("8.1.8")
    assert chosen["numpy"] < Version("2")
