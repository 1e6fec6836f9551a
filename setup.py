"""Puts the policy pack (policies/) and the imported CRD schemas (schemas/) into the
wheel as package data, under trainops/bundled/, so that an installed trainops works
outside this repository. Everything else is declared in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = {"policies": ("*.py", "config.yaml"), "schemas": ("**/*.json",)}


class BuildWithBundledData(build_py):
    def run(self):
        super().run()
        for name, patterns in BUNDLED.items():
            target = Path(self.build_lib) / "trainops" / "bundled" / name
            for pattern in patterns:
                for source in sorted((ROOT / name).glob(pattern)):
                    destination = target / source.relative_to(ROOT / name)
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, destination)


setup(cmdclass={"build_py": BuildWithBundledData})
