"""Imports of the releases remote code was copied from (issue 16, item 5): names `modeling_utils` and friends no
longer have are moved (drop_import's `moved`), vendored, or reported by CM908 with `[removed.instead]`'s advice;
`self.init_weights()` without `post_init()` becomes `self.post_init()` for transformers 5 (CM444).
The data was measured by bench/old_imports.py."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import Locator
from cachemigrate.rules.eras import removed_entry
from cachemigrate.rules.loader import RuleError, load_ruleset
from cachemigrate.rules.removed import removed_advice, removed_uses

REPO = Path(__file__).resolve().parent.parent
ERAS = ("4.52", "4.56", "5", "portable")
OPTIONS = Options(line_length=119)
KESTREL = REPO / "fixtures" / "oldimports" / "modeling_kestrel.py"


def cm908(code: str, era: str) -> list[str]:
    module = cst.parse_module(code)
    return [str(d) for d in removed_uses(module, module, load_ruleset(era).era, "m.py", Locator(module))]


@pytest.mark.parametrize("era", ERAS)
def test_no_rule_moves_a_name_to_where_the_era_runtime_lacks_it(era):
    """A rule inherited unchanged must not import a name from a module the era's runtime no longer has there."""
    rules = load_ruleset(era)
    for rule in rules.rules:
        for name, target in rule.params.get("moved", {}).items() if rule.action == "drop_import" else ():
            assert removed_entry(target, name, rules.era.removed.imports) is None, (era, rule.id, name, target)


@pytest.mark.parametrize("era", ERAS)
def test_every_advice_is_for_an_import_the_era_or_a_later_one_removes(era):
    advice = removed_advice(load_ruleset(era).era)
    listed = {entry for e in ERAS for entry in load_ruleset(e).era.removed.imports}
    assert advice and set(advice) <= listed


@pytest.mark.parametrize(
    "era, line, says",
    [
        ("4.52", "from transformers.modeling_utils import SQuADHead", "4.53 removed them"),
        ("4.56", "from transformers.generation import BeamSearchScorer", "`transformers.generation.beam_search`"),
        ("5", "from transformers.generation import BeamSearchScorer", "generate(num_beams=...)"),  # 5's word wins
        ("5", "from transformers.modeling_utils import prune_layer", "prune_linear_layer"),
        ("portable", "from transformers.pytorch_utils import torch_int_div", "rounding_mode"),  # inherited from 4.52
    ],
)
def test_cm908_names_the_line_the_import_and_what_to_do(era, line, says):
    (message,) = cm908("import torch\n" + line + "\n", era)
    assert message.startswith("m.py:2:1: CM908 the file imports `")
    assert "Instead: " in message and says in message.split("Instead: ")[1]


def test_an_aliased_import_of_a_moved_name_is_left_and_reported():
    code = KESTREL.read_text().replace("    apply_chunking_to_forward,\n", "").replace(
        "import torch\n", "import torch\nfrom transformers.modeling_utils import apply_chunking_to_forward as chunk\n", 1
    ).replace("apply_chunking_to_forward(self.feed", "chunk(self.feed")
    result = migrate_source(code, load_ruleset("5"), OPTIONS, path="k.py")
    assert result.status == "failed" and result.migrated == code
    assert [d.code for d in result.diagnostics] == ["CM908"]
    assert result.diagnostics[0].line == 6 and "transformers.pytorch_utils" in result.diagnostics[0].message


@pytest.mark.parametrize("era", ERAS)
def test_an_old_style_model_migrates_with_imports_every_runtime_of_the_era_has(era):
    result = migrate_source(KESTREL.read_text(), load_ruleset(era), OPTIONS, path="modeling_kestrel.py")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    new = result.migrated
    assert cm908(new, era) == []
    moved = era != "4.52"  # 4.42-4.53 still re-export the pytorch_utils helpers from modeling_utils
    assert ("from transformers.pytorch_utils import Conv1D, apply_chunking_to_forward" in new) == (era in ("5", "portable"))
    assert ("from transformers.modeling_utils import (\n    PreTrainedModel,\n)" in new) == moved
    assert ("\ndef prune_conv1d_layer(" in new) == (era in ("5", "portable"))  # 5.x removed the pruning helpers
    assert (new.count("        self.post_init()\n") == 1) == (era in ("5", "portable"))
    assert new.count("        self.init_weights()\n") == (0 if era in ("5", "portable") else 1)


def test_drop_import_rules_are_checked_at_load(tmp_path):
    root = tmp_path / "rules"
    (root / "4.52").mkdir(parents=True)
    (root / "4.52" / "era.toml").write_text((REPO / "rules" / "4.52" / "era.toml").read_text())
    rule = (REPO / "rules" / "4.52" / "CM450.toml").read_text()
    (root / "4.52" / "CM450.toml").write_text(rule.replace('"integrations.deepspeed"', '""', 1))
    with pytest.raises(RuleError, match="params.moved"):
        load_ruleset("4.52", root=root)
    (root / "4.52" / "CM450.toml").write_text(rule.replace("[params.moved]", "[params.elsewhere]"))
    with pytest.raises(RuleError):
        load_ruleset("4.52", root=root)


_BUILD = textwrap.dedent("""\
    import importlib.util, sys, torch
    spec = importlib.util.spec_from_file_location("modeling_kestrel", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.KestrelModel(module.KestrelConfig()).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        full, _ = model(ids, use_cache=False)
        first, past = model(ids[:, :3], use_cache=True)
        step, _ = model(ids[:, 3:], past_key_values=past, use_cache=True)
    assert torch.allclose(full[:, 3:], step, atol=1e-5), (full[:, 3:] - step).abs().max()
    model.h[0].attn.prune_heads({0})
    print("ok")
    """)
RUNTIMES = {
    "4.57": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}


@pytest.mark.runtimes
def test_a_migrated_old_style_model_builds_and_steps_on_4_57_and_5(tmp_path):
    """Portable output of the 4.6-style toy imports, builds (post_init), steps with its cache and prunes on both."""
    missing = [v for v, python in RUNTIMES.items() if not Path(python).is_file()]
    if missing:
        pytest.skip(f"no runtime venv for {missing} (bench/runtimes.py builds them)")
    result = migrate_source(KESTREL.read_text(), load_ruleset("portable"), OPTIONS, path="modeling_kestrel.py")
    assert result.status == "migrated"
    path = tmp_path / "modeling_kestrel.py"
    path.write_text(result.migrated)
    for version, python in RUNTIMES.items():
        done = subprocess.run([python, "-c", _BUILD, str(path)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() == "ok", (version, done.stderr[-2000:])
