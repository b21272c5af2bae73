"""CM315: an override of `_get_initial_cache_position` that computes GenerationMixin's own positions, reading the past's
length off the file's tuple layout, is removed in eras 4.56 and portable (the library's hook reads the migrated
Cache's length, in 4.51's call and 4.57's); any other override is left to CM313 (guard) and CM314 (refusal)."""

from functools import lru_cache
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.hook_override import replaced_by_library
from cachemigrate.rules.loader import load_ruleset

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "4.56" / "CM315"
OPTIONS = Options(line_length=119)


@lru_cache(maxsize=None)
def _ruleset(era: str):
    return load_ruleset(era)


def _migrate(name: str, era: str):
    path = FIXTURES / name
    return migrate_source(path.read_text(), _ruleset(era), OPTIONS, path=str(path))


def _codes(result) -> set[str]:
    return {d.code for d in result.diagnostics}


@pytest.mark.parametrize("era", ["4.56", "portable"])
def test_the_override_goes_and_the_file_migrates(era):
    result = _migrate("before.py", era)
    assert result.status == "migrated" and "CM314" not in _codes(result) and "CM315" in _codes(result)
    assert "def _get_initial_cache_position" not in result.migrated
    assert "torch.cat((layer_past[0], k), dim=2)" not in result.migrated  # the rest of the file was migrated too


@pytest.mark.parametrize("era", ["4.56", "portable"])
@pytest.mark.parametrize("name", ["writes_more_nomatch.py", "mask_start_nomatch.py"])
def test_an_override_doing_more_is_still_refused(era, name):
    result = _migrate(name, era)
    assert result.status == "failed" and "CM314" in _codes(result) and "CM315" not in _codes(result)
    assert result.migrated == (FIXTURES / name).read_text()


def test_era_452_keeps_the_guarded_override():
    """4.51 calls the override with its own arguments: CM313 hands a Cache to the library's hook, as before."""
    result = _migrate("before.py", "4.52")
    assert "CM315" not in _codes(result)
    assert "return super()._get_initial_cache_position(input_ids, model_kwargs)" in result.migrated


def test_era_5_leaves_the_dead_override():
    result = _migrate("before.py", "5")
    assert "CM315" not in _codes(result) and "def _get_initial_cache_position" in result.migrated


def _proof(body: str, signature: str = "self, input_ids, model_kwargs") -> tuple[bool, str]:
    code = f"def _get_initial_cache_position({signature}):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    function = cst.parse_module(code).body[0]
    return replaced_by_library(function, "cache_position", "past_key_values", "inputs_embeds")


LIBRARY_FORM = """past_length = 0
if "past_key_values" in model_kwargs:
    past_length = model_kwargs["past_key_values"][0].shape[1]
model_kwargs["cache_position"] = torch.arange(past_length, input_ids.shape[-1], device=input_ids.device)
return model_kwargs"""


def test_the_library_form_is_proved():
    assert _proof(LIBRARY_FORM) == (True, "")


@pytest.mark.parametrize(
    "change, signature, why",
    [
        (("", ""), "self, *args", "more than the hook's arguments"),
        (("", ""), "self, seq_length, device, model_kwargs", "does not take"),
        (
            (
                '    past_length = model_kwargs["past_key_values"][0].shape[1]',
                "    past_length = self.past_length(model_kwargs)",
            ),
            None,
            "calls",
        ),
        (('if "past_key_values" in model_kwargs:\n    past_length', "if True:\n    past_length"), None, "tests"),
        (('if "past_key_values" in model_kwargs:', 'if "inputs_embeds" in model_kwargs:'), None, "first position"),
        (("input_ids.shape[-1], device", "input_ids.shape[0], device"), None, "last position"),
        (("past_length = 0\n", "past_length = 0\nextra = 1\n"), None, "assigns `extra`"),
        (("return model_kwargs", "return None"), None, "does not end"),
        (('model_kwargs["cache_position"]', 'model_kwargs["position_ids"]'), None, "last statement"),
        (("device=input_ids.device", "device=self.device"), None, "device=input_ids.device"),
    ],
)
def test_other_forms_are_not_proved(change, signature, why):
    proved, said = _proof(LIBRARY_FORM.replace(*change), signature or "self, input_ids, model_kwargs")
    assert not proved and why in said
