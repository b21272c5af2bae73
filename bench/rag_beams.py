"""Beam search through transformers' own RAG-token model (a modeling_rag.py given by path: 4.51.3's, or a
migration of it) over a tiny random question encoder and BART generator, with the retrieved passages handed in
directly (`context_input_ids`, `context_attention_mask`, `doc_scores`: no retriever, no hub). Prints the tokens and
the kinds of past `_reorder_cache` was handed, as JSON. `--make` (on 4.51.3) builds the model first and saves its
weights in WEIGHTS_DIR, which later runs load.

    python bench/rag_beams.py $(python -c 'import transformers,os;print(os.path.dirname(transformers.__file__))')/models/rag/modeling_rag.py /tmp/w --make
    /work/venvs/tf4576/bin/python bench/rag_beams.py out/modeling_rag.py /tmp/w
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch
from toy_rag_beams import GENERATOR  # the same tiny BART generator as the toy's

QUESTION = {
    "model_type": "dpr",
    "vocab_size": 40,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "projection_dim": 0,
}


def load(path: str):
    """The file as a module of `transformers.models.rag` (its relative imports are that package's)."""
    name = f"transformers.models.rag.rag_under_test_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module")
    parser.add_argument("weights")
    parser.add_argument("--make", action="store_true")
    args = parser.parse_args()
    from transformers import AutoConfig
    from transformers.models.rag.configuration_rag import RagConfig

    module = load(args.module)
    folder = Path(args.weights)
    config = RagConfig(
        question_encoder=dict(QUESTION),
        generator=dict(GENERATOR),
        n_docs=2,
        vocab_size=40,
        decoder_start_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        forced_eos_token_id=None,
    )
    config.generator = AutoConfig.for_model(**GENERATOR)
    torch.manual_seed(0)
    model = module.RagTokenForGeneration(config).eval()
    if args.make:
        folder.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.normal_(std=0.5)
        torch.save(model.state_dict(), folder / "weights.pt")
    missing, unexpected = model.load_state_dict(torch.load(folder / "weights.pt"), strict=False)
    seen: list[str] = []
    reorder = module.RagTokenForGeneration._reorder_cache

    def recording(past, beam_idx):
        seen.append(type(past).__name__)
        return reorder(past, beam_idx)

    module.RagTokenForGeneration._reorder_cache = staticmethod(recording)
    generator = torch.Generator().manual_seed(1)
    batch, docs, length = 2, 2, 7
    context_input_ids = torch.randint(3, 40, (batch * docs, length), generator=generator)
    context_attention_mask = torch.ones_like(context_input_ids)
    context_attention_mask[-1, -2:] = 0
    doc_scores = torch.randn(batch, docs, generator=generator)
    with torch.no_grad():
        tokens = model.generate(
            context_input_ids=context_input_ids,
            context_attention_mask=context_attention_mask,
            doc_scores=doc_scores,
            n_docs=docs,
            num_beams=3,
            num_return_sequences=3,
            max_length=8,
            min_length=1,
        )
    import transformers

    print(
        json.dumps(
            {
                "transformers": transformers.__version__,
                "tokens": tokens.tolist(),
                "reorder_saw": sorted(set(seen)),
                "reorder_calls": len(seen),
                "missing": list(missing),
                "unexpected": list(unexpected),
            }
        )
    )


if __name__ == "__main__":
    main()
