"""The package list, which pyproject.toml cannot say: every package found under cachemigrate/, plus the built-in
rules (the repository's rules/ folder, installed as cachemigrate.builtin_rules; see [tool.setuptools])."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["cachemigrate", "cachemigrate.*"]), "cachemigrate.builtin_rules"])
