"""Which transformers package a modeling file with relative imports is imported in: retired models live in
``transformers.models.deprecated.<name>``."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from cachemigrate.probe.loading import guess_transformers_package  # noqa: E402


def test_a_retired_model_is_imported_in_the_deprecated_package(tmp_path):
    folder = tmp_path / "deprecated" / "trajectory_transformer"
    folder.mkdir(parents=True)
    path = folder / "modeling_trajectory_transformer.py"
    path.write_text("from ....activations import ACT2FN\n")
    assert guess_transformers_package(path) == "transformers.models.deprecated.trajectory_transformer"
    elsewhere = tmp_path / "modeling_trajectory_transformer.py"
    elsewhere.write_text("from ....activations import ACT2FN\n")
    assert guess_transformers_package(elsewhere) == "transformers.models.deprecated.trajectory_transformer"


def test_a_current_model_is_still_imported_in_its_own_package(tmp_path):
    path = tmp_path / "modeling_gpt2.py"
    path.write_text("from ...activations import ACT2FN\n")
    assert guess_transformers_package(path) == "transformers.models.gpt2"
