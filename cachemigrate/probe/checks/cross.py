"""Decoders with cross-attention (encoder-decoder heads, and causal heads that take encoder states): both models
attend to the same encoder states (see :mod:`cachemigrate.probe.seq2seq`); each check runs on every such decoder
of the module."""

from __future__ import annotations

from ..compare import (
    CheckFailed,
    CheckSkipped,
    clone,
    expect_same,
    kind,
    layout,
    logits,
    one_line,
    past,
    past_layers,
    traced_against_eager,
)
from ..context import MAX_NEW_TOKENS, PROMPT_LEN, STEPS
from .common import call_under_test, own_generate, recording_past_types, tuple_only_library_model
from .registry import check, needs_cross, needs_sdpa


def _each(probe, run) -> str:
    """``run`` on every decoder with cross-attention; skipped when it is skipped on all of them."""
    done, skipped = [], []
    for target in probe.cross_targets:
        reason = probe.cross_unbuildable(target)
        if reason:
            skipped.append(f"{target.kind} {target.name}: {reason}")
            continue
        try:
            done.append(f"{target.kind} {target.name}: {run(target)}")
        except CheckSkipped as exc:
            skipped.append(f"{target.kind} {target.name}: {exc}")
    if not done:
        raise CheckSkipped("; ".join(skipped))
    return "; ".join(done + [f"{s} (skipped)" for s in skipped])


def _reference(probe, target, original, states):
    """The original's logits and legacy pasts, prompt then each step, on its own tuple pasts."""
    prompt, steps = probe.prompt_and_steps()
    outs, given = [], None
    for tokens in [prompt, *steps]:
        out = original(**target.inputs(tokens, states, given, use_cache=True))
        outs.append(out)
        given = clone(past(out))  # a copy: a past of dicts is written into by the next step (fairseq style)
    return outs


def _stepwise(probe, attn: str) -> str:
    def run(target):
        original, migrated = probe.cross_pair(target, attn)
        prompt, steps = probe.prompt_and_steps()
        states = probe.states(target, original)
        past_o = past_m = None
        for i, tokens in enumerate([prompt, *steps]):
            out_o = original(**target.inputs(tokens, states, past_o, use_cache=True))
            out_m = migrated(**target.inputs(tokens, states, past_m, use_cache=True))
            expect_same(logits(out_o), logits(out_m), f"step {i} logits")
            expect_same(past(out_o), past(out_m), f"step {i} past")
            past_o, past_m = past(out_o), past(out_m)
        return f"{PROMPT_LEN} + {STEPS} steps bit-identical, past {layout(past_m[0])} per layer equal"

    return _each(probe, run)


@check(needs_cross)
def cross_tuple_stepwise(probe) -> str:
    """Prompt, then single tokens, attending to shared encoder states; each model steps with the past it returned
    itself: logits bit-identical, and the migrated past is the original's legacy tuple (self and cross keys and
    values per layer), equal."""
    return _stepwise(probe, "eager")


@check(needs_cross, needs_sdpa)
def cross_sdpa(probe) -> str:
    """cross_tuple_stepwise with sdpa attention."""
    return _stepwise(probe, "sdpa")


@check(needs_cross)
def cross_use_cache_false_with_past(probe) -> str:
    """A tuple past (with its cross-attention part) and ``use_cache=False``: same logits, no past returned."""

    def run(target):
        original, migrated = probe.cross_pair(target)
        prompt, steps = probe.prompt_and_steps()
        states = probe.states(target, original)
        given = past(original(**target.inputs(prompt, states, use_cache=True)))
        out_o = original(**target.inputs(steps[0], states, clone(given), use_cache=False))
        out_m = migrated(**target.inputs(steps[0], states, clone(given), use_cache=False))
        expect_same(logits(out_o), logits(out_m), "logits")
        for who, out in (("original", out_o), ("migrated", out_m)):
            if past(out) is not None:
                raise CheckFailed(f"{who} returned a past ({kind(past(out))}) with use_cache=False")
        return "logits bit-identical; no past returned"

    return _each(probe, run)


def _tuple_lengths(layers) -> tuple[int, list[int]]:
    """The positions a tuple past holds: its first layer's self-attention keys, and each layer's cross-attention
    keys (``(k, v, cross_k, cross_v)`` per layer)."""
    layers = past_layers(layers)
    return layers[0][0].shape[-2], [layer[2].shape[-2] for layer in layers]


def _cross_lengths(cache) -> list[int]:
    cross = cache.cross_attention_cache
    return [cross.get_seq_length(i) for i in range(len(cross))]


@check(needs_cross)
def cross_cache_written_once(probe) -> str:
    """An EncoderDecoderCache passed in comes back as the same object, step after step, with logits equal to the
    original's tuple path; its self-attention part grows by one token a step while the cross-attention part is
    written at the first step (``is_updated``) and never again: same length, same tensors."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    def run(target):
        original, migrated = probe.cross_pair(target)
        if tuple_only_library_model(migrated):
            raise CheckSkipped(tuple_only_library_model(migrated))
        states = probe.states(target, original)
        reference = _reference(probe, target, original, states)
        per_layer = len(past_layers(past(reference[0]))[0])
        if per_layer < 4:
            # GPT-2 with add_cross_attention recomputes the cross-attention every step: nothing is written once
            raise CheckSkipped(f"the original caches no cross-attention ({per_layer} tensors per layer)")
        prompt, steps = probe.prompt_and_steps()
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        written = None
        for i, tokens in enumerate([prompt, *steps]):
            out = call_under_test(migrated, **target.inputs(tokens, states, cache, use_cache=True))
            if past(out) is not cache:
                raise CheckFailed(f"step {i}: returned {kind(past(out))}, not the EncoderDecoderCache passed in")
            expect_same(logits(reference[i]), logits(out), f"step {i} logits")
            # as many positions as the original's tuple past holds in each part: PROMPT_LEN + i and ENCODER_LEN,
            # unless the original keeps something else there (BigBird's self-attention, handed the encoder states
            # too, keeps the encoder's keys in the self part)
            expected_self, expected_cross = _tuple_lengths(past(reference[i]))
            if cache.get_seq_length() != expected_self:
                raise CheckFailed(f"step {i}: self-attention length {cache.get_seq_length()}, not {expected_self}")
            lengths = _cross_lengths(cache)
            if lengths != expected_cross:
                raise CheckFailed(f"step {i}: cross-attention lengths {lengths}, expected {expected_cross}")
            if not all(cache.is_updated.get(layer) for layer in range(len(lengths))):
                raise CheckFailed(f"step {i}: is_updated is {cache.is_updated} after the cross-attention ran")
            tensors = [t.data_ptr() for t in cache.cross_attention_cache.key_cache]
            if written is not None and tensors != written:
                raise CheckFailed(f"step {i}: the cross-attention keys were written again")
            written = tensors
        return (
            f"same object; self part grew to {cache.get_seq_length()}, cross part {lengths[0]} from step 0 on, as"
            " the tuple past"
        )

    return _each(probe, run)


@check(needs_cross)
def cross_self_only_cache(probe) -> str:
    """A DynamicCache (what generate() hands a decoder-only head) comes back as the same object holding the
    self-attention keys and values, as many as the original's tuple past holds (MusicGen Melody prepends the
    encoder states to the sequence); logits equal the original's tuple path."""
    from transformers.cache_utils import DynamicCache

    def run(target):
        original, migrated = probe.cross_pair(target)
        if tuple_only_library_model(migrated):
            raise CheckSkipped(tuple_only_library_model(migrated))
        states = probe.states(target, original)
        reference = _reference(probe, target, original, states)
        prompt, steps = probe.prompt_and_steps()
        cache = DynamicCache()
        for i, tokens in enumerate([prompt, *steps]):
            out = call_under_test(migrated, **target.inputs(tokens, states, cache, use_cache=True))
            if past(out) is not cache:
                raise CheckFailed(f"step {i}: returned {kind(past(out))}, not the DynamicCache passed in")
            expect_same(logits(reference[i]), logits(out), f"step {i} logits")
            expected = past_layers(past(reference[i]))[0][0].shape[
                -2
            ]  # the original's own self-attention keys at this step
            if cache.get_seq_length() != expected:
                raise CheckFailed(f"step {i}: get_seq_length() is {cache.get_seq_length()}, not {expected}")
        return f"same object, grew to {cache.get_seq_length()} as the tuple past; logits equal the tuple path"

    return _each(probe, run)


@check(needs_cross)
def cross_output_attentions(probe) -> str:
    """Self- and cross-attention weights, for the prompt and for one cached step."""

    def run(target):
        original, migrated = probe.cross_pair(target)
        prompt, steps = probe.prompt_and_steps()
        states = probe.states(target, original)
        runs = []
        for model in (original, migrated):
            first = model(**target.inputs(prompt, states, use_cache=True, output_attentions=True))
            step = model(**target.inputs(steps[0], states, past(first), use_cache=True, output_attentions=True))
            runs.append((first, step))
        (first_o, step_o), (first_m, step_m) = runs
        for name in ("attentions", "decoder_attentions", "cross_attentions"):
            if hasattr(first_o, name):
                expect_same(getattr(first_o, name), getattr(first_m, name), f"prompt {name}")
                expect_same(getattr(step_o, name), getattr(step_m, name), f"cached-step {name}")
        return "prompt and cached-step attention weights identical"

    return _each(probe, run)


def _generate(target, model, prompt, states, **kwargs):
    kwargs.setdefault("num_beams", 1)
    # the prompt starts with the start token, so that generate() does not prepend the config's own (Marian's is
    # its pad id, 58100: outside a tiny vocabulary; mBART has none)
    start = int(prompt[0, 0])
    common = {"max_new_tokens": MAX_NEW_TOKENS, "do_sample": False, "pad_token_id": 0, **kwargs}
    common["decoder_start_token_id"] = start
    if target.kind == "seq2seq":
        from transformers.modeling_outputs import BaseModelOutput

        return model.generate(
            decoder_input_ids=prompt, encoder_outputs=BaseModelOutput(last_hidden_state=states), **common
        )
    return model.generate(prompt, encoder_hidden_states=states, **common)


@check(needs_cross)
def cross_generate(probe) -> str:
    """Greedy and 3-beam generate attending to shared encoder states give the same tokens, and the migrated
    decoder is handed a Cache (unless the head's own generate() sets up none, as MusicGen's). Skipped for a base
    model (no head to generate with)."""
    from transformers.cache_utils import Cache

    def run(target):
        if target.orig.head_class is None:
            # a base model (a Bert-style text model with no head in its file): nothing to generate with
            raise CheckSkipped(f"{target.name} is a base model, not a generation head")
        original, migrated = probe.cross_pair(target)
        prompt = probe.ids(2, 2)
        prompt[:, 0] = 1
        states = probe.states(target, original)
        notes = []
        for beams in (1, 3):
            try:
                expected = _generate(target, original, prompt, states, num_beams=beams)
            except Exception as exc:  # noqa: BLE001 - MusicGen's generate() has no beam search
                if beams == 1:
                    raise
                notes.append(f"3 beams: the original cannot ({one_line(exc)})")
                continue
            with recording_past_types(migrated) as seen:
                got = _generate(target, migrated, prompt, states, num_beams=beams)
            expect_same(expected, got, f"{beams}-beam tokens")
            if own_generate(migrated) or tuple_only_library_model(migrated):
                # MusicGen's generate() sets up no cache; a head over library layers that take tuples only here
                # keeps the tuple path: either way, as in the original
                continue
            if not any(issubclass(t, Cache) for t in seen[1:]):
                names = sorted({t.__name__ for t in seen[1:]})
                raise CheckFailed(f"{beams}-beam tokens identical, but the migrated model never got a Cache ({names})")
        how = "its own generate() keeps tuples" if own_generate(migrated) else f"decoded with {seen[-1].__name__}"
        if not own_generate(migrated) and tuple_only_library_model(migrated):
            how += f" ({tuple_only_library_model(migrated)})"
        done = "greedy" if notes else "greedy and 3 beams"
        return f"{MAX_NEW_TOKENS} tokens identical ({done}); migrated {how}" + "".join(f"; {n}" for n in notes)

    return _each(probe, run)


@check(needs_cross)
def cross_jit_trace_tuple(probe) -> str:
    """torch.jit.trace with a tuple past (self and cross parts) and encoder states; the traced migrated decoder
    matches the eager original on new inputs."""
    import torch

    def run(target):
        original, migrated = probe.cross_pair(target, torchscript=True, fresh=True)
        prompt, steps = probe.prompt_and_steps()

        def example(salt):
            states = probe.states(target, original, salt=salt)
            given = past(original(**target.inputs(prompt, states, use_cache=True)))
            return target.inputs(steps[0], states, given)  # tensors and tuples only: use_cache is the config's

        def trace(model):
            return torch.jit.trace(model, example_kwarg_inputs=clone(example(0)), strict=False, check_trace=False)

        try:
            traced_original = trace(original)
        except Exception as exc:  # noqa: BLE001
            raise CheckSkipped(f"the original cannot be traced: {one_line(exc)}") from exc
        try:
            traced = trace(migrated)
        except Exception as exc:  # noqa: BLE001
            raise CheckFailed(f"tracing the migrated model failed: {one_line(exc)}") from exc
        new = example(7)
        eager, got = original(**clone(new)), traced(**clone(new))
        verdict = traced_against_eager(eager, got, lambda: traced_original(**clone(new)))
        return verdict or "traced migrated decoder equals eager original on new inputs"

    return _each(probe, run)
