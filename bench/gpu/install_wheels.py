"""Install the carried wheels (.whl/, made by bench/gpu/wheels.sh) that this Python lacks, package by package.

    python3 bench/gpu/install_wheels.py .whl /tmp/site     # then: export PYTHONPATH=/tmp/site

A wheel is installed when its distribution is absent, or present at a version that some requirement
does not accept: pyproject.toml's dependencies and build requirements (the build backend needs
setuptools >= 77), plus the Requires-Dist lines of the wheels being installed (a carried pydantic
needs typing-extensions >= 4.16). Everything else the image already has stays untouched. All chosen
wheels go in one pip call (`--no-index --no-deps --target`); if that fails, each is retried alone so
that one bad wheel does not keep the others out. The exit status is 1 when any chosen wheel failed.
Needs Python >= 3.11 (tomllib) and `packaging`, both on the GPU image.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@dataclass(frozen=True)
class Wheel:
    """One carried wheel: its file, canonical distribution name and version."""

    path: Path
    name: str
    version: Version


def read_wheel(path: Path) -> Wheel:
    """Name and version from a wheel's file name (PEP 427); a malformed name is an error naming the file."""
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except ValueError as err:
        raise ValueError(f"{path}: not a wheel file name ({err})") from None
    return Wheel(path, canonicalize_name(name), version)


def wheel_requirements(path: Path) -> list[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA whose markers hold here (extras are not requested)."""
    with zipfile.ZipFile(path) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            raise ValueError(f"{path}: no .dist-info/METADATA inside")
        text = zf.read(meta).decode("utf-8", errors="replace")
    lines = [line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]
    return [req for req in map(Requirement, lines) if req.marker is None or req.marker.evaluate({"extra": ""})]


def project_requirements(pyproject: Path = PYPROJECT) -> list[Requirement]:
    """[project].dependencies and [build-system].requires of pyproject.toml (unparsable lines are skipped)."""
    data = tomllib.loads(pyproject.read_text())
    lines = [*data.get("project", {}).get("dependencies", []), *data.get("build-system", {}).get("requires", [])]
    reqs = []
    for line in lines:
        try:
            reqs.append(Requirement(line))
        except InvalidRequirement:
            continue
    return reqs


def installed_version(name: str) -> str | None:
    """Version of an installed distribution, None when absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def plan(
    wheels: Iterable[Wheel],
    requirements: Iterable[Requirement],
    installed: Callable[[str], str | None],
    wheel_reqs: Callable[[Wheel], list[Requirement]] = lambda w: wheel_requirements(w.path),
) -> list[tuple[Wheel, str]]:
    """(wheel, reason) for every wheel to install, to a fixed point: only the requirements of the project
    and of wheels already chosen count (a carried pydantic that is not installed must not pull its
    pydantic-core over the image's). A carried wheel that misses a requirement is an error."""
    wheels = list(wheels)
    reqs = list(requirements)
    chosen: dict[str, tuple[Wheel, str]] = {}
    while True:
        added = [(w, why) for w in wheels if w.name not in chosen and (why := _reason(w, reqs, installed))]
        if not added:
            return [chosen[w.name] for w in wheels if w.name in chosen]
        for wheel, why in added:
            chosen[wheel.name] = (wheel, why)
            reqs += wheel_reqs(wheel)


def _reason(wheel: Wheel, requirements: list[Requirement], installed: Callable[[str], str | None]) -> str:
    """Why `wheel` must be installed under `requirements` ('' when the installed version does)."""
    reqs = sorted({str(r) for r in requirements if canonicalize_name(r.name) == wheel.name})
    specs = [Requirement(r).specifier for r in reqs]
    unmet = [r for r, s in zip(reqs, specs, strict=True) if not s.contains(wheel.version, prereleases=True)]
    if unmet:
        raise ValueError(f"{wheel.path}: carried {wheel.version} does not satisfy {', '.join(unmet)}")
    have = installed(wheel.name)
    if have is None:
        return "missing"
    failing = [r for r, s in zip(reqs, specs, strict=True) if not s.contains(have, prereleases=True)]
    return f"{have} installed, need {', '.join(failing)}" if failing else ""


def pip_install(paths: list[Path], target: Path) -> bool:
    """One `pip install --no-index --no-deps --target` call; True on success."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-deps"]
    cmd += ["--no-compile", "--upgrade"]
    env = {**os.environ, "PIP_ROOT_USER_ACTION": "ignore"}  # the GPU machine runs commands as root
    return subprocess.run([*cmd, "--target", str(target), *map(str, paths)], env=env).returncode == 0


def install(chosen: list[tuple[Wheel, str]], target: Path, runner: Callable[[list[Path], Path], bool]) -> list[Wheel]:
    """Install the chosen wheels (all at once, else one by one); return the ones that failed."""
    if not chosen or runner([w.path for w, _ in chosen], target):
        return []
    return [w for w, _ in chosen if not runner([w.path], target)]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: install_wheels.py WHEEL_DIR TARGET_DIR", file=sys.stderr)
        return 2
    wheel_dir, target = Path(argv[0]), Path(argv[1])
    wheels = [read_wheel(p) for p in sorted(wheel_dir.glob("*.whl"))]
    if not wheels:
        print(f"install_wheels: no wheels in {wheel_dir}")
        return 0
    chosen = plan(wheels, project_requirements(), installed_version)
    for wheel, reason in chosen:
        print(f"  install {wheel.name} {wheel.version}: {reason}")
    print(f"install_wheels: {len(chosen)} of {len(wheels)} carried wheels needed")
    failed = install(chosen, target, pip_install)
    for wheel in failed:
        print(f"install_wheels: FAILED {wheel.path}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
