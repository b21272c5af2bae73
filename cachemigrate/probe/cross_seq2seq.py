"""The cross-attention checks of the cross-version probe: decoders that attend to encoder states (a seq2seq head, or a
causal head taking ``encoder_hidden_states``; see :mod:`.seq2seq`), the original on its runtime, the migrated file on
the target one, with one state_dict, the same encoder states and the same tokens.

:func:`record` runs on the original's side and returns what it did for each decoder; :func:`replay_checks` runs on
the migrated side against that, through :class:`.cross_checks.Replay` (the same tolerance, the same tracking of the
largest difference). The same-version probe's cross checks that compare within one runtime (sdpa against eager, ``jit.trace``
against eager) or need what is not recorded (attention weights) are listed as skipped, each with its reason.
"""

from __future__ import annotations

from .compare import CheckFailed, CheckInconclusive, CheckSkipped, kind, one_line, past_layers
from .compare import logits as _logits
from .compare import past as _past
from .context import MAX_NEW_TOKENS, PROMPT_LEN, STEPS
from .cross_checks import _clone
from .seq2seq import cross_targets, encoder_states

RUN = (
    "cross_tuple_stepwise",
    "cross_use_cache_false_with_past",
    "cross_cache_written_once",
    "cross_self_only_cache",
    "cross_generate",
)
NOT_HERE = {  # the same-version probe's cross checks this one does not run, and why
    "cross_sdpa": "compares sdpa with eager attention on one runtime: the same-version probe runs it",
    "cross_output_attentions": "attention weights are not recorded across runtimes: the same-version probe runs it",
    "cross_jit_trace_tuple": "compares a traced model with an eager one on one runtime: the same-version probe runs it",
}


def _tokens(vocab: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed * 1000 + 31)
    return torch.randint(1, vocab - 1, (2, PROMPT_LEN + STEPS), generator=generator)


def _generate(target, model, prompt, states, **kwargs):
    from .checks.cross import _generate as generate

    try:
        return generate(target, model, prompt, states, **kwargs)
    except Exception as exc:  # noqa: BLE001 - recorded; the migrated side must raise the same
        return {"error": one_line(exc)}


def record(classes, seed: int, settings: dict | None = None) -> list[dict]:
    """For each decoder with cross-attention of the original module: its config (with ``settings`` set over it),
    state_dict, encoder states, and what it returned (tuple path, step after step; ``use_cache=False`` with a past;
    greedy and 3-beam tokens)."""
    from .models import build_original

    entries = []
    for target in cross_targets(classes, classes, settings):
        entry = {"kind": target.kind, "model_class": target.orig.model_class.__name__}
        try:
            model = build_original(target.orig, target.config(), seed)
        except Exception as exc:  # noqa: BLE001 - MusicGen's seq2seq head wants a composite config
            entries.append({**entry, "unbuildable": f"no tiny model of the original: {one_line(exc)}"})
            continue
        try:
            entry.update(_run(target, model, seed))
        except Exception as exc:  # noqa: BLE001 - the original cannot be driven so: said for each check
            entry["unbuildable"] = f"the original raises {one_line(exc)}"
        entries.append(entry)
    return entries


def _run(target, model, seed: int) -> dict:
    import torch

    from .tiny import vocab_of

    states = encoder_states(seed, 2, target.width(model))
    tokens = _tokens(vocab_of(model.config), seed)
    steps, given = [], None
    with torch.no_grad():
        for end in range(PROMPT_LEN, PROMPT_LEN + STEPS + 1):
            start = 0 if given is None else end - 1
            out = model(**target.inputs(tokens[:, start:end], states, given, use_cache=True))
            given = _past(out)
            # a copy: a past of dicts is written into by the next step (fairseq style), a tuple past is not
            steps.append({"logits": _logits(out), "past": _clone(given)})
        prompt_past = _clone(steps[0]["past"])
        out = model(**target.inputs(tokens[:, PROMPT_LEN : PROMPT_LEN + 1], states, prompt_past, use_cache=False))
        no_cache = {"logits": _logits(out), "past_returned": _past(out) is not None}
        prompt = tokens[:, :2].clone()
        prompt[:, 0] = 1  # the start token (see checks.cross._generate)
        has_head = target.kind == "seq2seq" or target.orig.head_class is not None
        greedy = _generate(target, model, prompt, states) if has_head else None
        beam = _generate(target, model, prompt, states, num_beams=3) if has_head else None
    return dict(
        config_class=type(model.config).__name__,
        config=model.config.to_dict(),
        attn_implementation=model.config._attn_implementation,
        config_changes=dict(target.config_changes),
        state_dict=model.state_dict(),
        states=states,
        tokens=tokens,
        steps=steps,
        no_cache=no_cache,
        prompt=prompt,
        has_head=has_head,
        greedy=greedy,
        beam=beam,
    )


# -- the migrated side ----------------------------------------------------------------------------------------------


class Decoder:
    """The migrated module's decoder of one recorded entry, with the original's weights."""

    def __init__(self, module, entry: dict) -> None:
        import torch

        from .models import ModelClasses
        from .seq2seq import CrossTarget
        from .weights import initialise

        self.entry = entry
        cls = getattr(module, entry["model_class"])
        config_class = getattr(module, entry["config_class"], None) or cls.config_class
        config = config_class.from_dict(dict(entry["config"]))
        config._attn_implementation = entry["attn_implementation"]
        for name, value in entry["config_changes"].items():
            setattr(config, name, value)
        torch.manual_seed(0)
        model = cls(config)
        initialise(model, 0)
        model.load_state_dict(entry["state_dict"], strict=True)
        self.model = model.eval()
        classes = ModelClasses(config_class, None, cls, module.__name__)
        self.target = CrossTarget(entry["kind"], classes, classes)
        self.name = f"{entry['kind']} {entry['model_class']}"

    def call(self, start: int, end: int, past, **kwargs):
        import torch

        tokens = self.entry["tokens"][:, start:end]
        with torch.no_grad():
            return self.model(**self.target.inputs(tokens, self.entry["states"], past, **kwargs))


def _stepwise(r, d: Decoder) -> str:
    given = None
    for i, recorded in enumerate(d.entry["steps"]):
        end = PROMPT_LEN + i
        out = d.call(0 if given is None else end - 1, end, given, use_cache=True)
        r.close(recorded["logits"], _logits(out), f"step {i} logits")
        r.close(recorded["past"], _past(out), f"step {i} past")
        given = _past(out)
    return f"prompt {PROMPT_LEN} + {STEPS} steps and the tuple past within tolerance"


def _no_cache(r, d: Decoder) -> str:
    out = d.call(PROMPT_LEN, PROMPT_LEN + 1, _clone(d.entry["steps"][0]["past"]), use_cache=False)
    r.close(d.entry["no_cache"]["logits"], _logits(out), "logits")
    if (_past(out) is not None) != d.entry["no_cache"]["past_returned"]:
        raise CheckFailed(
            f"returned {kind(_past(out))}; the original returned a past: {d.entry['no_cache']['past_returned']}"
        )
    return "logits within tolerance; past returned as the original did"


def _cross_keys(cross) -> list:
    """The cross-attention part's key tensors, with the API this runtime has (``layers[i].keys`` from 4.56,
    ``key_cache`` before)."""
    layers = getattr(cross, "layers", None)
    return [layer.keys for layer in layers] if layers is not None else list(cross.key_cache)


def _written_once(r, d: Decoder) -> str:
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    per_layer = len(past_layers(d.entry["steps"][0]["past"])[0])
    if per_layer < 4:
        raise CheckSkipped(f"the original caches no cross-attention ({per_layer} tensors per layer)")
    cache, written = EncoderDecoderCache(DynamicCache(), DynamicCache()), None
    for i, recorded in enumerate(d.entry["steps"]):
        end = PROMPT_LEN + i
        out = d.call(0 if i == 0 else end - 1, end, cache, use_cache=True)
        if _past(out) is not cache:
            raise CheckFailed(f"step {i}: returned {kind(_past(out))}, not the EncoderDecoderCache passed in")
        r.close(recorded["logits"], _logits(out), f"step {i} logits")
        # as many positions as the original's tuple past holds in each part (end and ENCODER_LEN, unless the
        # original keeps something else there: BigBird's self-attention, handed the encoder states too, keeps the
        # encoder's keys in the self part)
        expected_self = past_layers(recorded["past"])[0][0].shape[-2]
        expected_cross = [layer[2].shape[-2] for layer in past_layers(recorded["past"])]
        if cache.get_seq_length() != expected_self:
            raise CheckFailed(f"step {i}: self-attention length {cache.get_seq_length()}, not {expected_self}")
        cross = cache.cross_attention_cache
        lengths = [cross.get_seq_length(layer) for layer in range(len(_cross_keys(cross)))]
        if lengths != expected_cross:
            raise CheckFailed(f"step {i}: cross-attention lengths {lengths}, expected {expected_cross}")
        tensors = [t.data_ptr() for t in _cross_keys(cross)]
        if written is not None and tensors != written:
            raise CheckFailed(f"step {i}: the cross-attention keys were written again")
        written = tensors
    return (
        f"same object; self part grew to {cache.get_seq_length()}, cross part {lengths[0]}, written at step 0 only,"
        " as the tuple past"
    )


def _self_only(r, d: Decoder) -> str:
    """A DynamicCache (what generate() hands a decoder-only head) comes back as the same object, holding as many
    self-attention positions as the original's tuple past; logits as the original's tuple path."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    for i, recorded in enumerate(d.entry["steps"]):
        end = PROMPT_LEN + i
        out = d.call(0 if i == 0 else end - 1, end, cache, use_cache=True)
        if _past(out) is not cache:
            raise CheckFailed(f"step {i}: returned {kind(_past(out))}, not the DynamicCache passed in")
        r.close(recorded["logits"], _logits(out), f"step {i} logits")
        expected = past_layers(recorded["past"])[0][0].shape[-2]
        if cache.get_seq_length() != expected:
            raise CheckFailed(f"step {i}: get_seq_length() is {cache.get_seq_length()}, not {expected}")
    return f"same object, grew to {cache.get_seq_length()} as the tuple past; logits within tolerance"


def _generated(r, d: Decoder) -> str:
    if not d.entry["has_head"]:
        raise CheckSkipped(f"{d.entry['model_class']} is a base model, not a generation head")
    done = []
    for beams, key in ((1, "greedy"), (3, "beam")):
        expected = d.entry[key]
        try:
            got = _generate_or_raise(d, beams)
        except Exception as exc:  # noqa: BLE001 - compared with the original's own error
            if isinstance(expected, dict) and one_line(exc) == expected["error"]:
                done.append(f"{beams} beam(s): both files raise {expected['error']}")
                continue
            raise
        if isinstance(expected, dict):
            raise CheckFailed(f"{beams} beam(s): the original raises {expected['error']}; the migrated one generates")
        r.same_tokens(expected, got, f"{beams}-beam tokens")
        done.append(f"{beams} beam(s): {MAX_NEW_TOKENS} tokens identical")
    if all("both files raise" in text for text in done):
        raise CheckInconclusive("; ".join(done) + ": not a divergence")
    return "; ".join(done)


def _generate_or_raise(d: Decoder, beams: int):
    from .checks.cross import _generate as generate

    return generate(d.target, d.model, d.entry["prompt"], d.entry["states"], num_beams=beams)


CHECKS = {
    "cross_tuple_stepwise": _stepwise,
    "cross_use_cache_false_with_past": _no_cache,
    "cross_cache_written_once": _written_once,
    "cross_self_only_cache": _self_only,
    "cross_generate": _generated,
}


def replay_checks(module, entries: list[dict]) -> list:
    """The cross-attention checks (named as the same-version probe's) as functions of a Replay, each run on every
    decoder recorded from the original; then the ones this probe does not run, as skipped with the reason."""

    def make(name):
        def run(replay) -> str:
            done, skipped = [], []
            if not entries:
                raise CheckSkipped("no decoder with cross-attention in the module")
            for entry in entries:
                label = f"{entry['kind']} {entry['model_class']}"
                if "unbuildable" in entry:
                    skipped.append(f"{label}: {entry['unbuildable']}")
                    continue
                try:
                    done.append(f"{label}: {CHECKS[name](replay, Decoder(module, entry))}")
                except CheckSkipped as exc:
                    skipped.append(f"{label}: {exc}")
            if not done:
                raise CheckSkipped("; ".join(skipped))
            return "; ".join(done + [f"{s} (skipped)" for s in skipped])

        run.__name__ = name
        return run

    def not_here(name):
        def run(replay) -> str:
            if not entries:
                raise CheckSkipped("no decoder with cross-attention in the module")
            raise CheckSkipped(NOT_HERE[name])

        run.__name__ = name
        return run

    return [make(name) for name in RUN] + [not_here(name) for name in NOT_HERE]
