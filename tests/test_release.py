"""The version is said once per place that needs it, and the same everywhere: the package, pyproject.toml, and the
pre-commit ``rev:`` in the README where it names one (the tag of that release, ``v<version>``; while the repository
has no release tag the README's snippet is a ``repo: local`` hook and names none)."""

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import cachemigrate

REPO = Path(__file__).resolve().parent.parent


def test_the_version_and_the_readme_rev_agree():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert cachemigrate.__version__ == version
    revs = re.findall(r"^\s*rev:\s*(\S+)", (REPO / "README.md").read_text(), re.MULTILINE)
    assert all(rev == f"v{version}" for rev in revs), revs
