"""transformers 2.x GPT-2 and CTRL (a stacked present per layer, keys read back with `layer_past[0].transpose(-2,
-1)` in GPT-2), migrated for era 4.52 and run on the installed transformers against the original: the prompt, then
two steps with the past each returned, and a run without a cache; logits and every stacked present compared with
`torch.equal`.

The files are read in place from a transformers 2.x source tree (never copied into this repository); their package
imports (`.file_utils`, `.modeling_utils`, `.configuration_*`...) are answered by small shims written here that
re-export what the installed transformers has. Usage:

    python bench/tf2_stacked.py /work/corpora/tf-2.11.0/transformers
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHIMS = {
    "activations.py": "from transformers.activations import ACT2FN\n",
    "configuration_gpt2.py": "from transformers import GPT2Config\n",
    "configuration_ctrl.py": "from transformers import CTRLConfig\n",
    "file_utils.py": "def add_start_docstrings(*a):\n    return lambda f: f\n\n\n"
    "add_start_docstrings_to_callable = add_start_docstrings\n",
    "modeling_utils.py": "from transformers.modeling_utils import PreTrainedModel, SequenceSummary\n"
    "from transformers.pytorch_utils import Conv1D, prune_conv1d_layer, prune_linear_layer\n",
    "cache_utils.py": "from transformers.cache_utils import Cache, DynamicCache\n",
    "generation.py": "from transformers.generation import GenerationMixin\n",
    "__init__.py": "",
}
MODELS = (("gpt2", "GPT2Config", "GPT2LMHeadModel"), ("ctrl", "CTRLConfig", "CTRLLMHeadModel"))


def _package(root: Path, name: str, source: Path) -> Path:
    folder = root / name
    folder.mkdir()
    for file, text in SHIMS.items():
        (folder / file).write_text(text)
    for model, _, _ in MODELS:
        shutil.copy(source / f"modeling_{model}.py", folder)
    return folder


def main(source: Path) -> int:
    import torch
    import transformers

    root = Path(tempfile.mkdtemp())
    _package(root, "tf2_original", source)
    migrated = _package(root, "tf2_migrated", source)
    files = [str(migrated / f"modeling_{model}.py") for model, _, _ in MODELS]
    subprocess.run(
        [sys.executable, "-m", "cachemigrate", "migrate", "--era", "4.52", "--no-cache", "-q", *files], check=True
    )
    sys.path.insert(0, str(root))
    failed = 0
    for model, config_name, head in MODELS:
        original = importlib.import_module(f"tf2_original.modeling_{model}")
        new = importlib.import_module(f"tf2_migrated.modeling_{model}")
        config = getattr(transformers, config_name)(
            n_layer=2, n_head=4, n_embd=32, vocab_size=99, n_positions=64, n_ctx=64, dff=64
        )
        torch.manual_seed(0)
        a, b = getattr(original, head)(config).eval(), getattr(new, head)(config).eval()
        b.load_state_dict(a.state_dict())
        ids = torch.randint(3, 99, (2, 7))
        same = True
        with torch.no_grad():
            out_a, out_b = a(ids[:, :5], use_cache=True), b(ids[:, :5], use_cache=True)
            same &= torch.equal(out_a[0], out_b[0])
            past_a, past_b = out_a[1], out_b[1]
            for i in (5, 6):
                out_a = a(ids[:, i : i + 1], past=past_a, use_cache=True)
                out_b = b(ids[:, i : i + 1], past=past_b, use_cache=True)
                past_a, past_b = out_a[1], out_b[1]
                same &= torch.equal(out_a[0], out_b[0]) and len(past_a) == len(past_b)
                same &= all(torch.equal(x, y) for x, y in zip(past_a, past_b))
            same &= torch.equal(a(ids, use_cache=False)[0], b(ids, use_cache=False)[0])
        shape = tuple(past_b[0].shape)
        print(f"{model}: {'bit-identical' if same else 'DIFFERENT'} (prompt 5 + 2 steps, presents {shape}, no cache)")
        failed += not same
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
