"""Packaging for lens: pure-Python packages plus the native `lens._C` extension (see csrc/)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["lens", "lens.*"]), "lens_kernels"],
    package_dir={"lens_kernels": "kernels"},
)
