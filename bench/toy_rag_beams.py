"""Beam search through a RAG-style head over a library seq2seq generator (fixtures/heads/toy_rag), on whichever
transformers runs this script: prints the tokens, and the kinds of past the head's `_reorder_cache` was handed, as
JSON. With `--make` (run it on the original's runtime, 4.51.3) it first builds the toy over a tiny random BART and
saves its weights and configuration in WEIGHTS_DIR, which every later run loads, so that runs on other releases
decode with the same weights.

    python bench/toy_rag_beams.py fixtures/heads/toy_rag/modeling_toy_rag.py /tmp/w --make
    /work/venvs/tf525/bin/python bench/toy_rag_beams.py out/modeling_toy_rag.py /tmp/w
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

GENERATOR = {
    "model_type": "bart",
    "vocab_size": 40,
    "d_model": 16,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_position_embeddings": 64,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "forced_eos_token_id": None,
}


def load(path: str):
    spec = importlib.util.spec_from_file_location(f"toy_rag_under_test_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="the toy's modeling file (original or migrated)")
    parser.add_argument("weights", help="folder of the weights and configuration (written with --make)")
    parser.add_argument("--make", action="store_true", help="build the toy with random weights and save them first")
    parser.add_argument("--beams", type=int, default=3)
    args = parser.parse_args()
    module = load(args.module)
    folder = Path(args.weights)
    if args.make:
        folder.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        model = module.ToyReaderForAnswers(module.ToyReaderConfig(generator=dict(GENERATOR), n_passages=2))
        with torch.no_grad():  # weights far from uniform, so that the beams part ways
            for parameter in model.parameters():
                parameter.normal_(std=0.5)
        torch.save(model.state_dict(), folder / "weights.pt")
        (folder / "generator.json").write_text(json.dumps(GENERATOR))
    config = module.ToyReaderConfig(generator=json.loads((folder / "generator.json").read_text()), n_passages=2)
    model = module.ToyReaderForAnswers(config).eval()
    missing, unexpected = model.load_state_dict(torch.load(folder / "weights.pt"), strict=False)
    seen: list[str] = []
    reorder = module.ToyReaderForAnswers._reorder_cache

    def recording(past, beam_idx):
        seen.append(type(past).__name__)
        return reorder(past, beam_idx)

    module.ToyReaderForAnswers._reorder_cache = staticmethod(recording)
    generator = torch.Generator().manual_seed(1)
    batch, passages, length = 2, 2, 7
    passage_ids = torch.randint(3, GENERATOR["vocab_size"], (batch, passages, length), generator=generator)
    passage_mask = torch.ones_like(passage_ids)
    passage_mask[1, 1, -2:] = 0  # a shorter passage
    passage_scores = torch.randn(batch, passages, generator=generator)
    start = torch.full((batch, 1), GENERATOR["decoder_start_token_id"], dtype=torch.long)
    with torch.no_grad():
        tokens = model.generate(
            start,
            passage_ids=passage_ids,
            passage_mask=passage_mask,
            passage_scores=passage_scores,
            num_beams=args.beams,
            num_return_sequences=args.beams,
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=GENERATOR["pad_token_id"],
            eos_token_id=GENERATOR["eos_token_id"],
            use_cache=True,
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
