"""Shared pytest fixtures: repository paths and the built-in 4.52 rule set (loaded once per session)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return REPO / "fixtures"


@pytest.fixture(scope="session")
def ruleset_452():
    """The built-in rules of era 4.52."""
    from cachemigrate.rules.loader import load_ruleset

    return load_ruleset("4.52")


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path_factory, monkeypatch):
    """Each test gets an empty result cache of its own (runs in subprocesses inherit it): no test answers from
    another's results, and nothing is written to the user's ~/.cache."""
    monkeypatch.setenv("CACHEMIGRATE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _no_probe_modules_left_behind():
    """A test that loads a modeling file as the probe does (``load_modeling_module``) and keeps its models has the
    modules in ``sys.modules`` until it ends: they are unloaded after it, so that the probe tests that check the
    probe leaves none behind see only their own."""
    yield
    import sys

    for name in [name for name in sys.modules if "_cm_" in name]:  # the probe's private names
        del sys.modules[name]


def summary_of(stderr: str) -> dict[str, int]:
    """The rows of migrate's closing summary table: {"would migrate": 1, "nothing to migrate": 3, ...}."""
    import re

    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("cachemigrate: ") and " file" in line]
    assert starts, f"no summary table in:\n{stderr}"
    rows = {}
    for line in lines[starts[-1] + 1 :]:
        found = re.match(r"^  (\S.*?)\s{2,}(\d+)$", line)
        if found:
            rows[found.group(1)] = int(found.group(2))
    return rows


def load_class(path, name: str, tag: str):
    """Class ``name`` of the Python file ``path``, imported as a module of its own (``tag`` keeps it apart)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"fixture_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def checkpointed_training(nets, ids):
    """One training step with gradient checkpointing on each of ``nets`` (same weights): the gradients of every
    parameter, and the cache each handed back."""
    grads, caches = [], []
    for net in nets:
        net.train()
        net.gradient_checkpointing_enable()
        net.zero_grad()
        hidden, cache = net(ids)
        hidden.square().mean().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
        caches.append(cache)
    return grads, caches
