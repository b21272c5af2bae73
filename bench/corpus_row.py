"""Migrate one modeling file and probe it: one row of the corpus report.

    python bench/corpus_row.py bart/modeling_bart.py bert/modeling_bert.py     # files of the installed transformers
    python bench/corpus_row.py --family encdec --json rows.json                # the encoder-decoder family of 4.51.3
    python bench/corpus_row.py --no-probe path/to/modeling_x.py                 # migration only

A row: the file, the migration status (``migrated``, ``clean``, ``failed``, ``error``), the rules that applied, the
diagnostics of a file left unchanged (``path:line: CODE message``), and, for a migrated file, the status of every
probe check (pass, fail, skip, error, setup-error) with its detail. :func:`row` is what the corpus report calls; the
probe runs in a child process per file so that one file's import side effects never reach the next.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from cachemigrate.engine import Options, migrate_source  # noqa: E402
from cachemigrate.rules.loader import load_ruleset  # noqa: E402

# The encoder-decoder ("next_decoder_cache") family of transformers 4.51.3, as in-scope files under models/.
ENCDEC_FAMILY = """
bart/modeling_bart.py mbart/modeling_mbart.py marian/modeling_marian.py pegasus/modeling_pegasus.py
blenderbot/modeling_blenderbot.py blenderbot_small/modeling_blenderbot_small.py plbart/modeling_plbart.py
m2m_100/modeling_m2m_100.py mvp/modeling_mvp.py bigbird_pegasus/modeling_bigbird_pegasus.py
pegasus_x/modeling_pegasus_x.py nllb_moe/modeling_nllb_moe.py biogpt/modeling_biogpt.py musicgen/modeling_musicgen.py
musicgen_melody/modeling_musicgen_melody.py xglm/modeling_xglm.py informer/modeling_informer.py
time_series_transformer/modeling_time_series_transformer.py autoformer/modeling_autoformer.py
patchtst/modeling_patchtst.py patchtsmixer/modeling_patchtsmixer.py speech_to_text/modeling_speech_to_text.py
speecht5/modeling_speecht5.py seamless_m4t/modeling_seamless_m4t.py seamless_m4t_v2/modeling_seamless_m4t_v2.py
wav2vec2/modeling_wav2vec2.py hubert/modeling_hubert.py sew/modeling_sew.py unispeech/modeling_unispeech.py
unispeech_sat/modeling_unispeech_sat.py data2vec/modeling_data2vec_audio.py bert/modeling_bert.py
roberta/modeling_roberta.py camembert/modeling_camembert.py xlm_roberta/modeling_xlm_roberta.py
xlm_roberta_xl/modeling_xlm_roberta_xl.py electra/modeling_electra.py ernie/modeling_ernie.py
data2vec/modeling_data2vec_text.py bert_generation/modeling_bert_generation.py
megatron_bert/modeling_megatron_bert.py rembert/modeling_rembert.py roc_bert/modeling_roc_bert.py
roformer/modeling_roformer.py xmod/modeling_xmod.py roberta_prelayernorm/modeling_roberta_prelayernorm.py
big_bird/modeling_big_bird.py blip/modeling_blip_text.py align/modeling_align.py altclip/modeling_altclip.py
bridgetower/modeling_bridgetower.py bros/modeling_bros.py chinese_clip/modeling_chinese_clip.py clap/modeling_clap.py
esm/modeling_esm.py layoutlm/modeling_layoutlm.py markuplm/modeling_markuplm.py splinter/modeling_splinter.py
superglue/modeling_superglue.py tapas/modeling_tapas.py blip_2/modeling_blip_2.py
instructblip/modeling_instructblip.py instructblipvideo/modeling_instructblipvideo.py led/modeling_led.py
trocr/modeling_trocr.py kosmos2/modeling_kosmos2.py prophetnet/modeling_prophetnet.py
""".split()
FAMILIES = {"encdec": ENCDEC_FAMILY}


def _models_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.origin:
        raise SystemExit("transformers is not installed: name files by path")
    return Path(spec.origin).parent / "models"


def _probe(original: Path, migrated: Path, timeout: float) -> dict:
    """{check: {status, detail}} from a child process running the probe."""
    script = (
        "import json, sys\n"
        "from cachemigrate.probe import run_probe\n"
        "results = run_probe(sys.argv[1], sys.argv[2])\n"
        "print(json.dumps({r.name: {'status': r.status, 'detail': r.detail} for r in results}))\n"
    )
    env_path = str(Path(__file__).resolve().parent.parent)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, str(original), str(migrated)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**__import__("os").environ, "PYTHONPATH": env_path},
        )
    except subprocess.TimeoutExpired:
        return {"probe": {"status": "error", "detail": f"timed out after {timeout:.0f} s"}}
    if done.returncode != 0 or not done.stdout.strip():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"probe": {"status": "error", "detail": f"probe crashed: {tail[0]}"}}
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(path: str | Path, *, probe: bool = True, tier: str = "dynamic", timeout: float = 900) -> dict:
    """Migrate ``path`` (a file, or a path relative to the installed transformers' models/) and probe it."""
    source = Path(path)
    if not source.is_file():
        source = _models_dir() / path
    started = time.perf_counter()
    ruleset = load_ruleset("4.52")
    result = migrate_source(source.read_text(), ruleset, Options(tier=tier, line_length=119), path=str(source))
    out = {
        "file": str(path),
        "status": result.status,
        "applied": sorted(result.applied),
        "diagnostics": [f"{Path(d.path).name}:{d.line}: {d.code} {d.message}" for d in result.diagnostics],
        "probe": {},
    }
    if probe and result.status == "migrated":
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "o").mkdir()
            (Path(tmp) / "m").mkdir()
            original, migrated = Path(tmp) / "o" / source.name, Path(tmp) / "m" / source.name
            shutil.copy(source, original)
            migrated.write_text(result.migrated)
            out["probe"] = _probe(original, migrated, timeout)
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def verdict(entry: dict) -> str:
    """``pass`` (migrated, some check passed and none diverged or could not run), ``diverged``, ``not proved``
    (no check passed, or the probe could not set the model up), ``not probed``, ``not migrated`` or ``clean``."""
    if entry["status"] != "migrated":
        return "clean" if entry["status"] == "clean" else "not migrated"
    if not entry["probe"]:
        return "not probed"
    statuses = {c["status"] for c in entry["probe"].values()}
    if statuses & {"fail", "error"}:
        return "diverged"
    return "pass" if "pass" in statuses and "setup-error" not in statuses else "not proved"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--family", choices=sorted(FAMILIES))
    parser.add_argument("--no-probe", action="store_true")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    files = list(args.files) + (FAMILIES[args.family] if args.family else [])
    rows = []
    for name in files:
        entry = row(name, probe=not args.no_probe)
        rows.append(entry)
        checks = entry["probe"]
        bad = [f"{n}: {c['detail']}" for n, c in checks.items() if c["status"] in ("fail", "error")]
        passed = sum(c["status"] == "pass" for c in checks.values())
        print(
            f"{name}: {entry['status']} -> {verdict(entry)} ({passed}/{len(checks)} checks pass, {entry['seconds']} s)"
        )
        for line in entry["diagnostics"][:3] + bad:
            print(f"    {line[:300]}")
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    allowed = ("pass", "clean", "not probed") if args.no_probe else ("pass", "clean")
    return 0 if all(verdict(r) in allowed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
