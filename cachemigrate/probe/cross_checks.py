"""The checks of the cross-version probe: the migrated model, on the target runtime, against what the original
returned on its own runtime (``reference.pt``, written by :func:`.worker.record`).

Logits and cached tensors are compared with a tolerance (``torch.allclose(migrated, original, rtol, atol)``; the
largest absolute difference is reported), because the two runtimes' library code (attention functions, generation)
is not the same code. Tokens (greedy, beam, left-padded greedy) must be identical, and the structure of every
returned past (tuple in -> a tuple of the original's layout out; a Cache in -> the same Cache object) exactly so.
"""

from __future__ import annotations

import time

from .compare import CheckFailed, CheckSkipped, kind, one_line
from .context import PROMPT_LEN, STEPS
from .runtime import BEAMS, cache_from_tuple, generate, in_cache_layout, logits_of, past_of, recording_caches


class Replay:
    """The migrated model on this runtime, the original's reference, and the tolerance; tracks the largest
    difference seen."""

    def __init__(self, model_class, reference: dict, *, rtol: float, atol: float) -> None:
        self.model_class = model_class
        self.reference = reference
        self.ref = reference["outputs"]
        self.inputs = reference["inputs"]
        self.meta = reference["meta"]
        self.rtol, self.atol = rtol, atol
        self.max_diff = 0.0
        self.model = None

    def tolerance_text(self) -> str:
        return f"torch.allclose(migrated, original, rtol={self.rtol:g}, atol={self.atol:g}); tokens exact"

    def build(self) -> None:
        """The migrated model from the original's config (through the migrated file's own config class) and the
        original's state_dict, loaded strictly."""
        import torch

        config_class = self.model_class.config_class
        config = config_class.from_dict(dict(self.reference["config"]))
        config._attn_implementation = self.meta["attn_implementation"]
        torch.manual_seed(0)
        model = self.model_class(config)
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
                diff = (migrated.double() - original.double()).abs().max().item() if original.numel() else 0.0
                self.max_diff = max(self.max_diff, diff)
                if not torch.allclose(migrated, original, rtol=self.rtol, atol=self.atol):
                    raise CheckFailed(f"{what}: max abs diff {diff:.3e} is outside the tolerance")
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
    def prompt(self):
        return self.inputs["full"][:, :PROMPT_LEN]

    def step(self, i: int):
        return self.inputs["full"][:, PROMPT_LEN + i : PROMPT_LEN + i + 1]


def _clone(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    return value


# -- the checks (each returns a one-line detail, or raises CheckFailed / CheckSkipped) ---------------------------------


def logits_no_cache(r: Replay) -> str:
    """Full forward without a cache."""
    r.close(r.ref["full_logits"], logits_of(r.forward(input_ids=r.inputs["full"], use_cache=False)), "logits")
    return f"logits {tuple(r.inputs['full'].shape)} within tolerance"


def tuple_in_tuple_out(r: Replay) -> str:
    """A tuple caller: no past in gives the original's legacy tuple past out; that tuple in gives a tuple out."""
    out = r.forward(input_ids=r.prompt, use_cache=True)
    r.close(r.ref["prompt_logits"], logits_of(out), "prompt logits")
    r.close(r.ref["prompt_past"], past_of(out), "past returned for the prompt")
    out = r.forward(input_ids=r.step(0), past_key_values=_clone(r.ref["prompt_past"]), use_cache=True)
    r.close(r.ref["step_logits"][0], logits_of(out), "step logits")
    r.close(r.ref["step0_past"], past_of(out), "past returned for a tuple in")
    return f"tuple[{len(r.ref['prompt_past'])}] in -> tuple out, values within tolerance"


def tuple_cache_stepwise(r: Replay) -> str:
    """Prompt, then single tokens, the migrated model stepping with the tuple past it returned itself."""
    given = None
    for i, tokens in enumerate([r.prompt] + [r.step(s) for s in range(STEPS)]):
        out = r.forward(input_ids=tokens, past_key_values=given, use_cache=True)
        expected = r.ref["prompt_logits"] if i == 0 else r.ref["step_logits"][i - 1]
        r.close(expected, logits_of(out), f"step {i} logits")
        given = past_of(out)
    return f"prompt {PROMPT_LEN} + {STEPS} steps within tolerance"


def cache_in_same_cache(r: Replay) -> str:
    """An empty DynamicCache, and one built from the original's tuple with this runtime's API: each comes back as
    the same object, grown by the tokens fed."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    for i, tokens in enumerate([r.prompt] + [r.step(s) for s in range(STEPS)]):
        out = r.forward(input_ids=tokens, past_key_values=cache, use_cache=True)
        _same_cache(out, cache, PROMPT_LEN + i, f"empty DynamicCache, step {i}")
        r.close(r.ref["prompt_logits"] if i == 0 else r.ref["step_logits"][i - 1], logits_of(out), f"step {i}")
    done = f"same object, grew to {PROMPT_LEN + STEPS} tokens; logits within tolerance"
    if not in_cache_layout(r.ref["prompt_past"], r.ref["step0_past"]):
        # [batch, seq, heads, d], sequence-first, fused, merged or transposed: a DynamicCache of these tensors is
        # not one any caller can hand this model
        return (
            done + " (a Cache from the original's tuple not tried: its past is not (key, value) in a Cache's layout)"
        )
    legacy = cache_from_tuple(_clone(r.ref["prompt_past"]))
    out = r.forward(input_ids=r.step(0), past_key_values=legacy, use_cache=True)
    _same_cache(out, legacy, PROMPT_LEN + 1, "DynamicCache from the original's tuple")
    r.close(r.ref["step_logits"][0], logits_of(out), "logits with a DynamicCache from the original's tuple")
    return done


def _same_cache(out, cache, length: int, what: str) -> None:
    returned = past_of(out)
    if returned is not cache:
        raise CheckFailed(f"{what}: returned {kind(returned)}, not the DynamicCache passed in")
    if cache.get_seq_length() != length:
        raise CheckFailed(f"{what}: get_seq_length() is {cache.get_seq_length()}, expected {length}")


def use_cache_false_with_past(r: Replay) -> str:
    """A tuple past with ``use_cache=False``: the original's logits, and no past returned (as the original)."""
    out = r.forward(input_ids=r.step(0), past_key_values=_clone(r.ref["prompt_past"]), use_cache=False)
    r.close(r.ref["no_cache_step_logits"], logits_of(out), "logits")
    if (past_of(out) is None) != (r.ref["no_cache_step_past"] is None):
        raise CheckFailed(f"returned {kind(past_of(out))}; the original {kind(r.ref['no_cache_step_past'])}")
    return "logits within tolerance; past returned as the original did"


def return_dict_false(r: Replay) -> str:
    """``return_dict=False, use_cache=True``: the original's tuple layout, with a legacy tuple past in it."""
    r.close(r.ref["tuple_out"], r.forward(input_ids=r.prompt, use_cache=True, return_dict=False), "output tuple")
    return f"tuple of {len(r.ref['tuple_out'])} in the original's layout"


def left_padding(r: Replay) -> str:
    """A left-padded batch: unmasked logits, and greedy tokens exactly."""
    mask = r.inputs["padded_mask"]
    out = r.forward(input_ids=r.inputs["padded"], attention_mask=mask, use_cache=False)
    r.close(r.ref["padded_logits"], logits_of(out)[mask.bool()], "unmasked logits")
    if not r.meta["has_head"]:
        return "unmasked logits within tolerance (no generation head)"
    r.same_tokens(r.ref["padded_greedy"], generate(r.model, r.inputs["padded"], mask), "left-padded greedy tokens")
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
        got = generate(r.model, r.prompt)
    r.same_tokens(r.ref["greedy"], got, "greedy tokens")
    caches = sorted({t.__name__ for t in seen[1:] if _is_cache_type(t)})
    if not caches:
        raise CheckFailed(
            f"tokens identical, but no Cache reached the model (got {sorted({t.__name__ for t in seen})})"
        )
    return f"tokens identical; decoded with {', '.join(caches)}"


def generate_beam(r: Replay) -> str:
    """Beam search (3 beams) on this runtime gives the original's tokens."""
    r.needs_head()
    r.same_tokens(r.ref["beam"], generate(r.model, r.prompt, num_beams=BEAMS), "beam tokens")
    return f"tokens identical ({BEAMS} beams)"


def generate_static(r: Replay) -> str:
    """``cache_implementation="static"`` gives the original's greedy tokens (when the migrated model claims the
    static tier: ``_supports_static_cache`` or ``_can_compile_fullgraph``)."""
    r.needs_head()
    cls = type(r.model)
    if not (getattr(cls, "_supports_static_cache", False) or getattr(cls, "_can_compile_fullgraph", False)):
        raise CheckSkipped("the migrated model does not claim the static tier")
    r.same_tokens(r.ref["greedy"], generate(r.model, r.prompt, cache_implementation="static"), "static tokens")
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
        except Exception as exc:  # noqa: BLE001 - a crash of the migrated model on a path the original ran
            status, detail = "error", f"the migrated model raised {one_line(exc)}"
        results.append(
            {"name": check.__name__, "status": status, "detail": detail, "seconds": time.perf_counter() - start}
        )
    return results
