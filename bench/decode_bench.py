"""Decode throughput of a migrated GPT-2: legacy tuple cache vs DynamicCache vs StaticCache + torch.compile.

Not a test. Migrates transformers' own modeling_gpt2.py with the static tier into a temp dir, builds a random
mid-size GPT-2 (6 layers, 512 hidden by default) and times a greedy decode loop of NEW tokens after a short
prompt, for each path and batch size, each in its own process (so peak memory is that path's own):

  legacy   the original file, tuple past_key_values
  dynamic  the migrated file, a DynamicCache
  static   the migrated file, a StaticCache and torch.compile(forward, fullgraph=True) of the decode step

Usage:  python bench/decode_bench.py [--batch 1 8] [--new-tokens 128] [--device cpu|cuda] [--mode default]
        python bench/decode_bench.py --prepare DIR     (migrate only: DIR/original and DIR/migrated)
        python bench/decode_bench.py --files DIR ...   (time files migrated earlier, on a machine without libcst)
Prints a markdown table: tokens/s (decode only, after a warm-up run) and peak memory (RSS on CPU, CUDA peak
allocated on GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = ("legacy", "dynamic", "static")


def migrate_gpt2(folder: Path) -> tuple[Path, Path]:
    import transformers

    from cachemigrate.engine import Options, migrate_source
    from cachemigrate.rules.loader import load_ruleset

    source = Path(transformers.__file__).parent / "models" / "gpt2" / "modeling_gpt2.py"
    (folder / "original").mkdir(parents=True)
    (folder / "migrated").mkdir(parents=True)
    original = folder / "original" / source.name
    shutil.copy(source, original)
    result = migrate_source(original.read_text(), load_ruleset("4.52"), Options(tier="static", line_length=119))
    if result.status != "migrated":
        raise SystemExit("migration failed:\n" + "\n".join(map(str, result.diagnostics)))
    migrated = folder / "migrated" / source.name
    migrated.write_text(result.migrated)
    return original, migrated


def run_one(args) -> dict:
    """One path and batch size, in this process."""
    import torch

    from cachemigrate.probe import load_modeling_module

    torch.manual_seed(0)
    device = torch.device(args.device)
    module = load_modeling_module(args.file)
    config = module.GPT2Config(
        n_layer=args.layers, n_embd=args.hidden, n_head=args.heads, vocab_size=args.vocab,
        n_positions=args.prompt + args.new_tokens + 8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    model = module.GPT2LMHeadModel(config).to(device).eval()
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt), device=device)
    total = args.prompt + args.new_tokens

    def decode() -> float:
        with torch.no_grad():
            if args.path == "static":
                from transformers.cache_utils import StaticCache

                cache = StaticCache(config=config, max_batch_size=args.batch, max_cache_len=total, device=device,
                                    dtype=torch.float32)  # fmt: skip
                out = model(
                    prompt,
                    past_key_values=cache,
                    use_cache=True,
                    cache_position=torch.arange(args.prompt, device=device),
                )
            elif args.path == "dynamic":
                from transformers.cache_utils import DynamicCache

                cache = DynamicCache()
                out = model(prompt, past_key_values=cache, use_cache=True)
            else:
                out = model(prompt, use_cache=True)
                cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            _sync(device)
            start = time.perf_counter()
            for step in range(args.new_tokens):
                position = torch.tensor([args.prompt + step], device=device)
                if args.path == "static":
                    out = step_fn(token, cache, position)
                else:
                    out = model(token, past_key_values=cache, use_cache=True)
                    cache = out.past_key_values
                token = out.logits[:, -1:].argmax(-1)
            _sync(device)
            return time.perf_counter() - start

    step_fn = None
    if args.path == "static":
        compiled = torch.compile(model.forward, fullgraph=True, mode=args.mode)

        def step_fn(token, cache, position):
            return compiled(input_ids=token, past_key_values=cache, use_cache=True, cache_position=position)

    decode()  # warm-up (and compilation)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = min(decode() for _ in range(args.repeats))
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    return {"path": args.path, "batch": args.batch, "tokens_per_s": args.batch * args.new_tokens / seconds,
            "seconds": seconds, "peak_mib": peak}  # fmt: skip


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default="default", help='torch.compile mode, e.g. "reduce-overhead" on a GPU')
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--prepare", type=Path, default=None, help="only migrate, into DIR/original and DIR/migrated")
    parser.add_argument("--files", type=Path, default=None, help="time DIR/original and DIR/migrated (from --prepare)")
    # internal: run a single measurement in this process
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        args.batch = args.batch[0]
        print(json.dumps(run_one(args)))
        return

    if args.prepare:
        migrate_gpt2(args.prepare)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.files:
            original, migrated = (args.files / part / "modeling_gpt2.py" for part in ("original", "migrated"))
        else:
            original, migrated = migrate_gpt2(Path(tmp))
        for batch in args.batch:
            for path in args.paths:
                file = original if path == "legacy" else migrated
                command = [sys.executable, __file__, "--one", "--path", path, "--file", str(file),
                           "--batch", str(batch)] + _forward(args)  # fmt: skip
                done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
                if done.returncode:
                    raise SystemExit(f"{path} batch {batch} failed:\n{done.stderr[-3000:]}")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=2))
                print(f"{path:8} batch {batch}: {row['tokens_per_s']:8.1f} tok/s, peak {row['peak_mib']:.0f} MiB",
                      file=sys.stderr)  # fmt: skip
    legacy = {r["batch"]: r["tokens_per_s"] for r in rows if r["path"] == "legacy"}
    import torch
    import transformers

    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, {where}")
    print(f"\n{args.layers} layers, hidden {args.hidden}, {args.heads} heads, vocab {args.vocab}, prompt {args.prompt}, "
          f"{args.new_tokens} new tokens, device {args.device}, compile mode {args.mode}\n")  # fmt: skip
    print("| path | batch | tokens/s | vs legacy | peak memory (MiB) |")
    print("|---|---|---|---|---|")
    for r in rows:
        ratio = r["tokens_per_s"] / legacy[r["batch"]] if r["batch"] in legacy else float("nan")
        print(f"| {r['path']} | {r['batch']} | {r['tokens_per_s']:.1f} | {ratio:.2f}x | {r['peak_mib']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


def _forward(args) -> list[str]:
    return ["--new-tokens", str(args.new_tokens), "--prompt", str(args.prompt), "--layers", str(args.layers),
            "--hidden", str(args.hidden), "--heads", str(args.heads), "--vocab", str(args.vocab),
            "--repeats", str(args.repeats), "--device", args.device, "--mode", args.mode]  # fmt: skip


if __name__ == "__main__":
    main()
