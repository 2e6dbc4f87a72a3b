"""Installable as users install it: the sdist holds everything a build needs, and an installed (non-editable)
package run from another directory finds its presets, its assets and the data, and says when its native
library is missing.

Run: `.venv/bin/python -m pytest tests/test_packaging.py -q` (about a minute: it builds an sdist in an isolated
env without torch, and a pure-Python wheel that it installs into a scratch directory). The full native wheel
build is the `slow` test of tests/csrc/test_build.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import families
import pytest
from shared_data import DATA_DIR

REPO = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def sdist_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("sdist")
    # Isolated, as `python -m build --sdist` runs for a user: no torch in the build env.
    _run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(REPO)], cwd=out)
    (archive,) = out.glob("lens_rl-*.tar.gz")
    with tarfile.open(archive) as tar:
        return [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]


def test_sdist_holds_what_a_build_needs(sdist_files: list[str]) -> None:
    tracked = _run(["git", "ls-files", "csrc", "configs", "kernels", "lens/tasks/assets"], cwd=REPO).stdout.split()
    needed = {"LICENSE", "README.md", "CMakeLists.txt", "setup.py", "pyproject.toml", *tracked}
    assert needed <= set(sdist_files), sorted(needed - set(sdist_files))
    assert not [f for f in sdist_files if f.endswith((".so", ".pyc"))]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pure-Python wheel (LENS_BUILD_NATIVE=0) installed into a scratch directory, as site-packages."""
    wheels, target = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("site")
    env = {**os.environ, "LENS_BUILD_NATIVE": "0"}
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        cwd=wheels,
        env=env,
    )
    (wheel,) = wheels.glob("lens_rl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lens/configs/paper_qwen3-4b_lens.yaml" in names and "lens_kernels/token_logprobs.py" in names
    assert "lens/tasks/assets/vartrack/model.safetensors" in names and "lens/datahub.py" in names
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)], cwd=wheels)
    return target


# The dev venv also has lens installed in editable mode, whose import hook would still serve `lens._C` from the
# checkout; drop that hook so the subprocess sees only the installed copy, as on a user's machine.
_ONLY_INSTALLED = (
    "import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]; "
    "sys.argv[0] = 'lens.train'; runpy.run_module('lens.train', run_name='__main__', alter_sys=True)"
)


def _train_cli(*args: str) -> list[str]:
    return [sys.executable, "-c", _ONLY_INSTALLED, *args]


def _installed_env(site: Path) -> dict[str, str]:
    # The scratch site first, the checkout nowhere on the path: imports must resolve to the installed copy.
    return {
        **os.environ,
        "PYTHONPATH": str(site),
        "LENS_DATA_DIR": str(DATA_DIR),
        "OMP_NUM_THREADS": "1",
    }


def test_installed_package_finds_presets_from_another_directory(installed: Path, tmp_path: Path) -> None:
    env = _installed_env(installed)
    where = _run(
        [sys.executable, "-c", "import lens, lens.config as c; print(lens.__file__, c.CONFIG_DIR)"],
        cwd=tmp_path,
        env=env,
    ).stdout
    assert str(installed / "lens") in where and str(REPO) not in where
    qwen3 = families.build("qwen3", tmp_path / "qwen3")
    # The preset's own data sets may be absent (a fresh clone): a file of the user's stands in, as the preset allows.
    rows = tmp_path / "problems.jsonl"
    lines = [json.dumps({"problem": f"What is {n} + {n}?", "answer": str(2 * n)}) for n in range(9)]
    rows.write_text("\n".join(lines) + "\n")
    argv = [
        "--config",
        "paper_qwen3-4b_lens",
        "--dry-run",
        f"model.path={qwen3}",
        f"data.train={rows}",
        "data.eval=[]",
        "data.eval_every=0",
    ]
    out = _run(_train_cli(*argv), cwd=tmp_path, env=env)
    assert "dry run: ok" in out.stdout and "problems: 9 loaded" in out.stdout


def test_installed_package_trains_and_warns_once_without_native_ops(installed: Path, tmp_path: Path) -> None:
    env = _installed_env(installed)
    run_dir = f"run_dir={tmp_path / 'run'}"
    cmd = _train_cli("optim.steps=1", "data.eval_every=0", "data.train_size=16", run_dir, "logging.tensorboard=false")
    out = _run(cmd, cwd=tmp_path, env=env)
    assert out.stderr.count("native library lens._C could not be loaded") == 1
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


def test_the_wheel_ships_lens_kernels_and_no_kernels_package(installed: Path) -> None:
    assert (installed / "lens_kernels" / "__init__.py").is_file()
    assert not (installed / "kernels").exists()


def _hub_stand_in(tmp_path: Path) -> Path:
    """A stand-in for Hugging Face's `kernels` package (transformers 5.25 requires it and imports it)."""
    hub = tmp_path / "site" / "kernels"
    hub.mkdir(parents=True)
    (hub / "__init__.py").write_text("HUB = True\n")
    (hub / "layer.py").write_text("")
    return hub.parent


def test_kernels_folder_is_no_package() -> None:
    # kernels/ must stay a plain folder: as a package it would be found as `kernels` wherever a checkout's root
    # is on sys.path (`python -m` run from it) and stand in for the hub's package.
    assert not (REPO / "kernels" / "__init__.py").exists()
    assert (REPO / "kernels" / "lens_kernels" / "__init__.py").is_file()


def test_a_checkout_does_not_shadow_the_hub_kernels_package(tmp_path: Path) -> None:
    # The checkout's root first on sys.path, as `python -m` from it puts it, then the hub's package: the hub's wins.
    site = _hub_stand_in(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}
    code = "import kernels, kernels.layer; print(kernels.HUB, kernels.layer.__file__)"
    flag, layer = _run([sys.executable, "-c", code], cwd=REPO, env=env).stdout.split()
    assert flag == "True" and Path(layer) == site / "kernels" / "layer.py"
    # Without it: this environment's hub package when it has one (transformers >= 5.25 installs it), else an empty
    # namespace that runs no lens code and that transformers' availability check reports as absent.
    where = "import importlib.util as u; s = u.find_spec('kernels'); print(s.origin if s else '')"
    installed = _run([sys.executable, "-c", where], cwd=tmp_path).stdout.strip()  # away from any checkout
    code = (
        "import kernels; from transformers.utils import is_kernels_available; "
        "print(kernels.__file__, sorted(vars(kernels)) == sorted(['__doc__', '__file__', '__loader__', "
        "'__name__', '__package__', '__path__', '__spec__']), is_kernels_available())"
    )
    out = _run([sys.executable, "-c", code], cwd=REPO).stdout.split()
    if installed:
        assert Path(out[0]) == Path(installed)
    else:
        assert out == ["None", "True", "False"]


def test_the_tests_import_the_checkouts_lens_kernels() -> None:
    # pyproject's pytest `pythonpath` puts kernels/ first, so the suite tests this tree, not an installed copy.
    import lens_kernels

    assert Path(lens_kernels.__file__) == REPO / "kernels" / "lens_kernels" / "__init__.py"


def test_an_editable_install_maps_lens_kernels_and_nothing_named_kernels(tmp_path: Path) -> None:
    # The PEP 660 wheel that `pip install -e .` installs, built and unpacked here (installing it would replace the
    # dev environment's own editable install). -S: site-packages are added by hand, this install's first, so its
    # finder is the one imported (the dev venv's finder module has the same name).
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    env = {**os.environ, "LENS_BUILD_NATIVE": "0"}
    build = f"from setuptools import build_meta; print(build_meta.build_editable({str(wheels)!r}))"
    name = _run([sys.executable, "-c", build], cwd=REPO, env=env).stdout.strip().splitlines()[-1]
    zipfile.ZipFile(wheels / name).extractall(site)
    code = (
        f"import site; site.addsitedir({str(site)!r}); site.addsitedir({sysconfig.get_paths()['purelib']!r}); "
        "import importlib.util as u, lens_kernels; s = u.find_spec('kernels'); "
        "print(lens_kernels.__file__, s.origin if s else None)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ours, hub = _run([sys.executable, "-S", "-c", code], cwd=tmp_path, env=env).stdout.split()
    assert Path(ours) == REPO / "kernels" / "lens_kernels" / "__init__.py"
    # A hub `kernels` package may be installed (transformers brings it), also in a .venv inside the clone: it must
    # not be the checkout's kernels/ folder.
    assert hub == "None" or (REPO / "kernels") not in (Path(hub), *Path(hub).parents)
