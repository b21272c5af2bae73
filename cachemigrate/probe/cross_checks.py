"""The checks of the cross-version probe: the migrated model, on the target runtime, against what the original
returned on its own runtime (``reference.pt``, written by :func:`.worker.record`).

Logits and cached tensors are compared with a tolerance (``torch.allclose(migrated, original, rtol, atol)``; the
largest absolute difference is reported), because the two runtimes' library code (attention functions, generation)
is not the same code. Tokens (greedy, beam, left-padded greedy) must be identical, and the structure of every
returned past (tuple in -> a tuple of the original's layout out; a Cache in -> the same Cache object) exactly so.
"""

from __future__ import annotations

import time

from .compare import CheckFailed, CheckInconclusive, CheckSkipped, kind, nan_verdict, one_line
from .context import PROMPT_LEN, STEPS
from .weights import initialise
from .runtime import BEAMS, Stepper, cache_from_tuple, generate, in_cache_layout, logits_of, past_of, recording_caches


GENERATED = ("greedy", "beam", "padded_greedy")  # the original's generate() calls recorded (worker.record)


class Replay:
    """The migrated model on this runtime, the original's reference, and the tolerance; tracks the largest
    difference seen."""

    def __init__(self, model_class, reference: dict, *, rtol: float, atol: float) -> None:
        self.model_class = model_class
        self.reference = reference
        self.ref = reference.get("outputs", {})  # none for an encoder-decoder model alone
        self.inputs = reference.get("inputs", {})
        self.meta = reference["meta"]
        self.rtol, self.atol = rtol, atol
        self.max_diff = 0.0
        self.nan_seen = False  # some output held NaN (on both sides, at the same positions): said in the header
        self.model = None
        self.stepper = Stepper(self.meta)

    def tolerance_text(self) -> str:
        return f"torch.allclose(migrated, original, rtol={self.rtol:g}, atol={self.atol:g}); tokens exact"

    def build(self) -> None:
        """The migrated model from the original's config (through the migrated file's config class of the original's
        name: its own, or one of its sub-configs) and the original's state_dict, loaded strictly."""
        import torch

        from .models import config_class_named

        config_class = config_class_named(self.model_class, self.meta.get("config_class"))
        config = config_class.from_dict(dict(self.reference["config"]))
        config._attn_implementation = self.meta["attn_implementation"]
        seed = self.meta.get("seed", 0)
        torch.manual_seed(seed)
        model = self.model_class(config)
        initialise(model, seed)  # the buffers a state_dict does not hold, as the original side's
        model.load_state_dict(self.reference["state_dict"], strict=True)
        self.model = model.eval()

    # -- comparing ---------------------------------------------------------------------------------------------------

    def close(self, original, migrated, what: str) -> None:
        """Tensors (or nested tuples of tensors) equal within the tolerance, structure exactly equal."""
        import torch

        if isinstance(original, torch.Tensor):
            if not isinstance(migrated, torch.Tensor):
                raise CheckFailed(f"{what}: {kind(migrated)}, the original returned a tensor")
            if original.shape != migrated.shape:
                raise CheckFailed(f"{what}: shape {tuple(migrated.shape)}, the original's {tuple(original.shape)}")
            if original.is_floating_point():
                nan = torch.isnan(original) | torch.isnan(migrated)
                gap = (migrated.double() - original.double()).abs()[~nan]
                diff = gap.max().item() if gap.numel() else 0.0
                self.max_diff = max(self.max_diff, diff)
                close = torch.isclose(migrated, original, rtol=self.rtol, atol=self.atol)[~nan].all()
                if not close:
                    raise CheckFailed(f"{what}: max abs diff {diff:.3e} is outside the tolerance")
                try:
                    mismatch = nan_verdict(original, migrated, what)
                except CheckInconclusive:
                    self.nan_seen = True
                    raise
                if mismatch:
                    raise CheckFailed(f"{what}: {mismatch}")
            elif not torch.equal(original, migrated):
                raise CheckFailed(f"{what}: {int((original != migrated).sum())} of {original.numel()} elements differ")
            return
        if isinstance(original, (tuple, list)):
            if not isinstance(migrated, (tuple, list)) or len(original) != len(migrated):
                got = f"{kind(migrated)}[{len(migrated)}]" if isinstance(migrated, (tuple, list)) else kind(migrated)
                raise CheckFailed(f"{what}: {got}, the original returned {kind(original)}[{len(original)}]")
            for index, (a, b) in enumerate(zip(original, migrated)):
                self.close(a, b, f"{what}[{index}]")
            return
        if isinstance(original, dict):  # a past kept as dicts of parts: the same parts and fields, each close
            if not isinstance(migrated, dict) or list(original) != list(migrated):
                got = f"{kind(migrated)} {list(migrated)}" if isinstance(migrated, dict) else kind(migrated)
                raise CheckFailed(f"{what}: {got}, the original returned a dict {list(original)}")
            for key in original:
                self.close(original[key], migrated[key], f"{what}[{key!r}]")
            return
        if original != migrated:
            raise CheckFailed(f"{what}: {migrated!r}, the original returned {original!r}")

    def same_tokens(self, original, migrated, what: str) -> None:
        import torch

        if original.shape != migrated.shape or not torch.equal(original, migrated):
            raise CheckFailed(f"{what}: {migrated.tolist()} vs the original's {original.tolist()}")

    def needs_head(self) -> None:
        if not self.meta["has_head"]:
            raise CheckSkipped("no generation head in the file")

    def forward(self, **kwargs):
        import torch

        with torch.no_grad():
            return self.model(**kwargs)

    @property
    def prompt(self) -> dict:
        """The prompt's inputs (``input_ids``, and an attention mask where the original needed one)."""
        return self.stepper.call(self.inputs["full"], None)

    def step(self, i: int) -> dict:
        """The inputs of cached step ``i``, as the original was stepped."""
        return self.stepper.call(self.inputs["full"], i)

    def tokens(self, reference_key: str, *args, **kwargs):
        """Compare ``generate(self.model, *args, **kwargs)`` with the original's tokens under ``reference_key``; where
        the original's generate() raised, the migrated one must raise the same (then the check cannot run: a
        set-up error, said so), or an error the original raised in another of its generate() calls (this
        runtime's generate() got further, to where the original model fails: CPM-Ant's beam search on 4.51.3 fails
        in the library's own reshape, before the cached step its greedy search fails at), and generating anyway is
        a difference."""
        expected = self.ref[reference_key]
        if not isinstance(expected, dict):
            self.same_tokens(expected, generate(self.model, *args, **kwargs), reference_key.replace("_", " "))
            return
        try:
            got = generate(self.model, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - compared with the original's own error
            error = one_line(exc)
            if error == expected["error"]:
                raise CheckInconclusive(f"both files raise {error} in generate(): not a divergence") from exc
            raised = {key: self.ref.get(key) for key in GENERATED if key != reference_key}
            elsewhere = [key for key, other in raised.items() if isinstance(other, dict) and other["error"] == error]
            if elsewhere:
                raise CheckInconclusive(
                    f"both files raise in generate(): the original {expected['error']}, the migrated {error}, "
                    f"which the original's own {elsewhere[0].replace('_', ' ')} generate() raises: not a divergence"
                ) from exc
            raise
        raise CheckFailed(
            f"the original's generate() raises {expected['error']}; the migrated one returns {got.tolist()}"
        )


def _clone(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):  # a past kept as dicts of parts (fairseq style): the model may write into them
        return {key: _clone(v) for key, v in value.items()}
    return value


# -- the checks (each returns a one-line detail, or raises CheckFailed / CheckSkipped) ---------------------------------


def logits_no_cache(r: Replay) -> str:
    """Full forward without a cache."""
    r.close(r.ref["full_logits"], logits_of(r.forward(input_ids=r.inputs["full"], use_cache=False)), "logits")
    return f"logits {tuple(r.inputs['full'].shape)} within tolerance"


def tuple_in_tuple_out(r: Replay) -> str:
    """A tuple caller: no past in gives the original's legacy tuple past out; that tuple in gives a tuple out."""
    out = r.forward(**r.prompt, use_cache=True)
    r.close(r.ref["prompt_logits"], logits_of(out), "prompt logits")
    r.close(r.ref["prompt_past"], past_of(out), "past returned for the prompt")
    out = r.forward(**r.step(0), past_key_values=_clone(r.ref["prompt_past"]), use_cache=True)
    r.close(r.ref["step_logits"][0], logits_of(out), "step logits")
    r.close(r.ref["step0_past"], past_of(out), "past returned for a tuple in")
    return f"tuple[{len(r.ref['prompt_past'])}] in -> tuple out, values within tolerance"


def tuple_cache_stepwise(r: Replay) -> str:
    """Prompt, then single tokens, the migrated model stepping with the tuple past it returned itself."""
    given = None
    for i, inputs in enumerate([r.prompt] + [r.step(s) for s in range(STEPS)]):
        out = r.forward(**inputs, past_key_values=given, use_cache=True)
        expected = r.ref["prompt_logits"] if i == 0 else r.ref["step_logits"][i - 1]
        r.close(expected, logits_of(out), f"step {i} logits")
        given = past_of(out)
    return f"prompt {PROMPT_LEN} + {STEPS} steps within tolerance"


def cache_in_same_cache(r: Replay) -> str:
    """An empty DynamicCache, and one built from the original's tuple with this runtime's API: each comes back as
    the same object, grown by the tokens fed. The second only where the original's past is (key, value) pairs in a
    Cache's layout (not BLOOM's 3-D keys, nor a fused tensor): no caller can build a Cache from another one."""
    from transformers.cache_utils import DynamicCache

    step0 = r.ref.get("step0_past")  # growth tells [batch, heads, seq, d] from [batch, seq, heads, d]; shapes cannot
    legacy_layout = in_cache_layout(r.ref["prompt_past"], step0) if step0 is not None else False
    # what the original's past holds after the prompt (CPM-Ant adds positions of its own), else the tokens fed
    held = r.ref["prompt_past"][0][0].shape[-2] if legacy_layout else PROMPT_LEN
    cache = DynamicCache()
    for i, inputs in enumerate([r.prompt] + [r.step(s) for s in range(STEPS)]):
        out = r.forward(**inputs, past_key_values=cache, use_cache=True)
        _same_cache(out, cache, held + i, f"empty DynamicCache, step {i}")
        r.close(r.ref["prompt_logits"] if i == 0 else r.ref["step_logits"][i - 1], logits_of(out), f"step {i}")
    done = f"same object, grew to {held + STEPS} positions; logits within tolerance"
    if not legacy_layout:
        return done + " (no DynamicCache built from the original's tuple: it is not (key, value) in a Cache's layout)"
    legacy = cache_from_tuple(_clone(r.ref["prompt_past"]))
    out = r.forward(**r.step(0), past_key_values=legacy, use_cache=True)
    _same_cache(out, legacy, held + 1, "DynamicCache from the original's tuple")
    r.close(r.ref["step_logits"][0], logits_of(out), "logits with a DynamicCache from the original's tuple")
    return done


def _same_cache(out, cache, length: int, what: str) -> None:
    returned = past_of(out)
    if returned is not cache:
        raise CheckFailed(f"{what}: returned {kind(returned)}, not the DynamicCache passed in")
    if cache.get_seq_length() != length:
        raise CheckFailed(f"{what}: get_seq_length() is {cache.get_seq_length()}, expected {length}")


def use_cache_false_with_past(r: Replay) -> str:
    """A tuple past with ``use_cache=False``: the original's logits, and no past returned (as the original).
    Skipped where the original itself raised on it (recorded by the worker)."""
    if "no_cache_step_error" in r.ref:
        raise CheckSkipped(
            f"the original raises on a tuple past with `use_cache=False`: {r.ref['no_cache_step_error']}"
        )
    out = r.forward(**r.step(0), past_key_values=_clone(r.ref["prompt_past"]), use_cache=False)
    r.close(r.ref["no_cache_step_logits"], logits_of(out), "logits")
    if (past_of(out) is None) != (r.ref["no_cache_step_past"] is None):
        raise CheckFailed(f"returned {kind(past_of(out))}; the original {kind(r.ref['no_cache_step_past'])}")
    return "logits within tolerance; past returned as the original did"


def return_dict_false(r: Replay) -> str:
    """``return_dict=False, use_cache=True``: the original's tuple layout, with a legacy tuple past in it."""
    r.close(r.ref["tuple_out"], r.forward(**r.prompt, use_cache=True, return_dict=False), "output tuple")
    return f"tuple of {len(r.ref['tuple_out'])} in the original's layout"


def left_padding(r: Replay) -> str:
    """A left-padded batch: unmasked logits, and greedy tokens exactly."""
    mask = r.inputs["padded_mask"]
    out = r.forward(input_ids=r.inputs["padded"], attention_mask=mask, use_cache=False)
    r.close(r.ref["padded_logits"], logits_of(out)[mask.bool()], "unmasked logits")
    if not r.meta["has_head"]:
        return "unmasked logits within tolerance (no generation head)"
    r.tokens("padded_greedy", r.inputs["padded"], mask)
    return "unmasked logits within tolerance; greedy tokens identical"


def generate_available(r: Replay) -> str:
    """The head has ``generate()`` on this runtime, and ``can_generate()`` says so."""
    r.needs_head()
    if not callable(getattr(r.model, "generate", None)):
        raise CheckFailed(f"'{type(r.model).__name__}' object has no attribute 'generate'")
    if not r.model.can_generate():
        raise CheckFailed(f"{type(r.model).__name__}.can_generate() is False")
    return "generate() and can_generate()"


def generate_greedy(r: Replay) -> str:
    """Greedy generate on this runtime gives the original's tokens, and the model is handed a Cache."""
    r.needs_head()
    with recording_caches(r.model) as seen:
        r.tokens("greedy", r.prompt["input_ids"])
    caches = sorted({t.__name__ for t in seen[1:] if _is_cache_type(t)})
    if not caches:
        raise CheckFailed(
            f"tokens identical, but no Cache reached the model (got {sorted({t.__name__ for t in seen})})"
        )
    return f"tokens identical; decoded with {', '.join(caches)}"


def generate_beam(r: Replay) -> str:
    """Beam search (3 beams) on this runtime gives the original's tokens."""
    r.needs_head()
    r.tokens("beam", r.prompt["input_ids"], num_beams=BEAMS)
    return f"tokens identical ({BEAMS} beams)"


def generate_static(r: Replay) -> str:
    """``cache_implementation="static"`` gives the original's greedy tokens (when the migrated file claims the
    static tier: ``_supports_static_cache`` or ``_can_compile_fullgraph`` set by a class of its own; a head over a
    library model inherits the library model's claim, not the file's)."""
    r.needs_head()
    cls = type(r.model)
    own = [k for k in cls.__mro__ if k.__module__ == cls.__module__]
    if not any(vars(k).get("_supports_static_cache") or vars(k).get("_can_compile_fullgraph") for k in own):
        raise CheckSkipped("the migrated file does not claim the static tier")
    r.tokens("greedy", r.prompt["input_ids"], cache_implementation="static")
    return "tokens identical with a StaticCache"


def _is_cache_type(t: type) -> bool:
    from transformers.cache_utils import Cache

    return isinstance(t, type) and issubclass(t, Cache)


CROSS_CHECKS = (
    logits_no_cache,
    tuple_in_tuple_out,
    tuple_cache_stepwise,
    cache_in_same_cache,
    use_cache_false_with_past,
    return_dict_false,
    left_padding,
    generate_available,
    generate_greedy,
    generate_beam,
    generate_static,
)
CROSS_CHECK_NAMES = tuple(c.__name__ for c in CROSS_CHECKS)


def encoder_decoder_only(check):
    """``check``, skipped: the module's models all take encoder states (the cross_* checks drive them)."""

    def skipped(r: Replay) -> str:
        raise CheckSkipped("encoder-decoder model only: driven by the cross_* checks")

    skipped.__name__ = check.__name__
    return skipped


def run_checks(r: Replay, checks) -> list[dict]:
    """Each check's result as a dict (name, status, detail, seconds); an exception is an error of the migrated
    file (the original ran these same calls on its runtime when the reference was recorded)."""
    import torch

    results = []
    for check in checks:
        start = time.perf_counter()
        torch.manual_seed(0)
        try:
            status, detail = "pass", check(r)
        except CheckFailed as exc:
            status, detail = "fail", str(exc)
        except CheckSkipped as exc:
            status, detail = "skip", str(exc)
        except CheckInconclusive as exc:  # neither agreement nor a divergence: said so
            status, detail = "setup-error", str(exc)
        except Exception as exc:  # noqa: BLE001 - a crash of the migrated model on a path the original ran
            status, detail = "error", f"the migrated model raised {one_line(exc)}"
        results.append(
            {"name": check.__name__, "status": status, "detail": detail, "seconds": time.perf_counter() - start}
        )
    return results
