"""The package list, which pyproject.toml cannot say: every package found under cachemigrate/, plus the built-in
rules (the repository's rules/ folder, installed as cachemigrate.builtin_rules; see [tool.setuptools]).

Building also checks the built-in rules once, on the package just built, and ships the record of it
(``cachemigrate/rules/checked.json``, see :mod:`cachemigrate.rules.checked`): an installed package never checks its
own rules at run time. A built-in rule file that does not load fails the build with the loader's message; where
libcst cannot be imported (a build environment without it), the package is built without the record and each
install checks its rules on its first run."""

import os
import subprocess
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class build_py_checking_rules(build_py):
    def run(self) -> None:
        super().run()
        if self.dry_run or getattr(self, "editable_mode", False):
            return  # an editable install runs the checkout's rules: each user's record is kept at run time
        build_lib = os.path.abspath(self.build_lib)
        record = os.path.join(build_lib, "cachemigrate", "rules", "checked.json")
        if os.path.exists(record):
            os.remove(record)  # an earlier build's
        env = {**os.environ, "PYTHONPATH": build_lib}  # the package just built, not the checkout
        command = [sys.executable, "-m", "cachemigrate.rules.checked"]
        done = subprocess.run(command, cwd=build_lib, env=env, capture_output=True, text=True)
        # the messages name the built copy of a rule file: name the repository's own
        built_rules = os.path.join(build_lib, "cachemigrate", "builtin_rules")
        sys.stderr.write(done.stdout + done.stderr.replace(built_rules, os.path.abspath("rules")))
        if done.returncode == 1:
            raise SystemExit("cachemigrate: the built-in rules do not load (see above): the package is not built")
        if done.returncode != 0:
            print("cachemigrate: built without a record of the checked rules: an install checks them once")


setup(
    packages=[*find_packages(include=["cachemigrate", "cachemigrate.*"]), "cachemigrate.builtin_rules"],
    cmdclass={"build_py": build_py_checking_rules},
)
