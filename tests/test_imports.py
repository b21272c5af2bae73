"""Where the imports the rules need land: isort's place in the file's own sections, only the new lines changed."""

import difflib

import libcst as cst
import pytest

from cachemigrate.edit.apply import apply_plan
from cachemigrate.edit.edits import Plan
from cachemigrate.edit.imports import plan_imports
from cachemigrate.edit.render import format_statements
from cachemigrate.proof.audit import Offsets, claims_of, find_violation
from cachemigrate.rules.loader import load_ruleset

ERA = load_ruleset("4.52").era


def added(code: str, names: list[str], width: int = 119) -> str:
    """The file with ``names`` imported, after checking that nothing but the import statements changed."""
    module = cst.parse_module(code)
    plan = Plan()
    plan.extend(plan_imports(module, ERA, names, lambda text: format_statements(text, 0, width)))
    applied = apply_plan(module, plan)
    new = applied.module.code
    assert find_violation(code, new, claims_of(plan, applied.extra_claims, Offsets(module))) is None
    return new


def inserted_lines(before: str, after: str) -> list[str]:
    """The lines of the diff; a removed line fails (the user's own imports are never moved)."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [line for line in diff if line.startswith("- ")], "\n".join(diff)
    return [line[2:] for line in diff if line.startswith("+ ")]


HEAD = '''"""A model."""

import math
from typing import Tuple, Union

import torch
from torch import nn

from ...activations import ACT2FN
from ...modeling_utils import PreTrainedModel
from ...utils import logging
from .configuration_wren import WrenConfig


logger = logging.get_logger(__name__)
'''


def test_a_new_relative_import_goes_to_its_sorted_place_in_the_relative_group():
    after = added(HEAD, ["Cache", "DynamicCache"])
    assert inserted_lines(HEAD, after) == ["from ...cache_utils import Cache, DynamicCache"]
    lines = after.splitlines()
    assert (
        lines.index("from ...cache_utils import Cache, DynamicCache")
        == lines.index("from ...activations import ACT2FN") + 1
    )


def test_a_name_joins_the_statement_of_its_module_in_its_sorted_place():
    after = added(HEAD, ["typing:Optional"])
    assert "from typing import Optional, Tuple, Union\n" in after
    assert "from typing import Tuple, Union" not in after
    assert after.count("from typing") == 1


def test_a_section_the_file_lacks_becomes_its_own_group_in_isort_order():
    code = HEAD.replace("import math\nfrom typing import Tuple, Union\n\n", "")
    after = added(code, ["typing:Optional"])
    assert '"""A model."""\n\nfrom typing import Optional\n\nimport torch\n' in after


def test_without_relative_imports_transformers_is_imported_absolutely_among_third_party():
    code = HEAD.split("from ...activations")[0].rstrip("\n") + "\n\n\nclass Wren:\n    pass\n"
    after = added(code, ["Cache"])
    assert "from torch import nn\nfrom transformers.cache_utils import Cache\n\n\nclass Wren:" in after


def test_a_third_party_group_the_file_lacks_goes_between_standard_library_and_relative():
    code = HEAD.replace("import torch\nfrom torch import nn\n\n", "")
    after = added(code, ["import torch"])
    assert "from typing import Tuple, Union\n\nimport torch\n\nfrom ...activations" in after


def test_an_unsorted_group_keeps_its_order_and_gets_the_new_import_after_its_last():
    code = HEAD.replace(
        "from ...modeling_utils import PreTrainedModel\nfrom ...utils import logging\n",
        "from ...utils import logging\nfrom ...modeling_utils import PreTrainedModel\n",
    )
    after = added(code, ["Cache"])
    assert inserted_lines(code, after) == ["from ...cache_utils import Cache"]
    assert "from .configuration_wren import WrenConfig\nfrom ...cache_utils import Cache\n\n\nlogger" in after


def test_absolute_transformers_imports_join_their_group():
    code = HEAD.replace("from ...", "from transformers.").replace("from .configuration_wren", "from wren_config")
    after = added(code, ["Cache"])
    assert "from transformers.activations import ACT2FN\nfrom transformers.cache_utils import Cache\n" in after


def test_an_exploded_import_stays_exploded_and_a_long_new_one_wraps_at_the_width():
    code = HEAD.replace("from ...utils import logging\n", "from ...utils import (\n    logging,\n)\n")
    after = added(code, ["utils:add_start_docstrings", "Cache", "DynamicCache", "EncoderDecoderCache"], width=50)
    assert "from ...utils import (\n    add_start_docstrings,\n    logging,\n)\n" in after
    assert "from ...cache_utils import (\n    Cache,\n    DynamicCache,\n    EncoderDecoderCache,\n)\n" in after


def test_a_file_without_imports_gets_them_after_its_docstring():
    code = '"""A model."""\n\n\nclass Wren:\n    pass\n'
    assert (
        added(code, ["typing:Optional"])
        == '"""A model."""\n\nfrom typing import Optional\n\n\nclass Wren:\n    pass\n'
    )


@pytest.mark.parametrize("names", [["utils:logging"], ["import torch"]])
def test_what_the_file_imports_already_is_not_added(names):
    assert added(HEAD, names) == HEAD
