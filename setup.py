"""The one packaging step pyproject.toml cannot declare: the top-level configs/ folder shipped as the
data package activation_bench.configs (mapped in pyproject.toml's package-dir; its yamls are package
data there). Package discovery (`[tool.setuptools.packages.find]`) finds every code package but
cannot find a package whose folder lies outside activation_bench/, so the build adds it here."""

from setuptools import setup
from setuptools.command.build_py import build_py

CONFIGS = "activation_bench.configs"


class BuildPy(build_py):
    def finalize_options(self) -> None:
        packages = self.distribution.packages
        if packages is not None and CONFIGS not in packages:
            packages.append(CONFIGS)
        super().finalize_options()


setup(cmdclass={"build_py": BuildPy})
