"""How fast the CLI starts, and how big it installs.

Startup: `trainops --version` and `trainops validate` of one small file (no cache),
as a pre-commit hook or an editor runs them, against `python -c pass` on the same
interpreter, in one run: medians of alternating rounds, bytecode written beforehand
as an installed package has it. Size: the wheel built from this repository and what
installing it (with its dependencies, without pip itself) adds to a fresh venv.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

from tests.bench import user_env
from tests.support import copy_sources

VENV_BIN = Path(sys.executable).parent
ROUNDS = 15
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: small\ndata:\n  k: v\n"


def run() -> dict:
    results = {**startup(), **install_size()}
    return {"startup": results}


def startup() -> dict:
    env = user_env()
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.yaml"
        small.write_text(CONFIGMAP)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "trainops --version": [str(VENV_BIN / "trainops"), "--version"],
            "trainops validate (one file)": [
                str(VENV_BIN / "trainops"),
                "validate",
                "--no-cache",
                str(small),
            ],
        }
        for command in commands.values():  # write bytecode, warm the page cache
            subprocess.run(command, env=env, capture_output=True, check=True, cwd=tmp)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(ROUNDS):
            for name, command in commands.items():
                start = time.perf_counter()
                subprocess.run(command, env=env, capture_output=True, check=True, cwd=tmp)
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    peer = medians["python -c pass"]
    print(f"\nstartup (median of {ROUNDS} alternating rounds)")
    for name, seconds in medians.items():
        print(f"  {name:32} {seconds * 1000:7.0f} ms  ({seconds / peer:4.1f}x python -c pass)")
    return {name: round(seconds, 4) for name, seconds in medians.items()}


def install_size() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = copy_sources(root / "source")
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
        subprocess.run(
            [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", root / "dist", source],
            check=True,
            capture_output=True,
        )
        [wheel] = (root / "dist").glob("*.whl")
        wheel_mib = wheel.stat().st_size / 2**20
        venv.create(root / "venv", with_pip=True)
        site = next((root / "venv" / "lib").glob("python*/site-packages"))
        before = _size(site)
        packages_before = len(list(site.glob("*.dist-info")))
        python = str(root / "venv" / "bin" / "python")
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", str(wheel)],
            check=True,
            capture_output=True,
        )
        added = _size(site) - before
        packages = len(list(site.glob("*.dist-info"))) - packages_before
    print(
        f"\ninstall: wheel {wheel_mib:.1f} MiB; "
        f"the CLI alone adds {packages} packages, {added / 2**20:.0f} MiB to a fresh venv"
    )
    return {
        "wheel_mib": round(wheel_mib, 2),
        "installed_mib": round(added / 2**20, 1),
        "installed_packages": packages,
    }


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
