"""A fresh virtual environment into which tests install BOO's distributions, as a user would.

The environment has no pip of its own and no BOO package: its third-party dependencies
(torch, IREE, pluggy, pip, setuptools, pytest...) come from this environment through a
folder of symlinks that leaves out every BOO package, so nothing BOO leaks in and nothing
is downloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from ..conftest import REPO

_BOO_NAMES = ("boo_", "boo-", "__editable__")  # every BOO distribution, the examples included


def _dependency_farm(target: Path) -> Path:
    """Symlinks to this environment's packages, BOO's own left out."""
    target.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(_BOO_NAMES) or entry.suffix == ".pth":
            continue
        (target / entry.name).symlink_to(entry)
    return target


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def create_venv(root: Path) -> Path:
    """A virtual environment at ``root/venv`` seeing this one's third-party packages only."""
    venv = root / "venv"
    result = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert result.returncode == 0, result.stderr
    python = venv / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(site, "boo_test_dependencies.pth").write_text(str(_dependency_farm(root / "deps")) + "\n")
    return venv


def pip_install(venv: Path, *folders: str) -> None:
    """A real (non-editable) install of the repository's folders, offline."""
    result = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                  "--no-build-isolation", *(str(REPO / f) for f in folders)])
    assert result.returncode == 0, result.stdout + result.stderr


def subprocess_env(**settings: str) -> dict[str, str]:
    """This process's environment without PYTHONPATH, plus ``settings``."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **settings}
