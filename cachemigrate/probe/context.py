"""What every check gets: a :class:`Probe`, holding both files' model classes, the seed, the model pairs built so
far and the inputs."""

from __future__ import annotations

from .compare import past
from .compare import one_line
from .models import ModelClasses, build_original, build_pair
from .seq2seq import build_cross_pair, cross_targets, decoder_changes, encoder_states
from .steps import refeeds_whole_sequence
from .tiny import tiny_config, vocab_of

PROMPT_LEN = 5
STEPS = 3
MAX_NEW_TOKENS = 6


class Probe:
    """Both modules' classes, the seed and the models built so far; the checks take one of these.

    ``static``: None runs the static-cache checks only when the migrated model sets ``_supports_static_cache``,
    True forces them, False skips them.
    """

    def __init__(
        self,
        original: ModelClasses,
        migrated: ModelClasses,
        *,
        static: bool | None = None,
        seed: int = 0,
        settings: dict | None = None,
    ):
        self.orig = original
        self.migr = migrated
        self.static = static
        self.seed = seed
        self.settings = dict(settings or {})  # config values set over the tiny ones (a variant of the model)
        self.vocab_size = vocab_of(tiny_config(original.config_class, settings=self.settings))
        self._pairs: dict = {}
        self._buildable: dict = {}
        self._refeeds: bool | None = None

    def control(self, side: str) -> "Probe":
        """A probe that compares one side's file with itself ("original" or "migrated"): what that file does alone."""
        classes = {"original": self.orig, "migrated": self.migr}[side]
        return Probe(classes, classes, static=self.static, seed=self.seed, settings=self.settings)

    # -- models ------------------------------------------------------------------------------------------------------

    def pair(self, attn: str = "eager", *, torchscript: bool = False, fresh: bool = False):
        """(original model, migrated model) with one shared state_dict, in eval mode. Cached unless ``fresh``."""
        key = (attn, torchscript)
        if fresh or key not in self._pairs:
            config = tiny_config(self.orig.config_class, attn=attn, torchscript=torchscript, settings=self.settings)
            for name, value in decoder_changes(self.orig).items():
                if name not in self.settings:  # the settings asked for stay last
                    setattr(config, name, value)
            built = build_pair(self.orig, self.migr, config, self.seed)
            if fresh:
                return built
            self._pairs[key] = built
        return self._pairs[key]

    @property
    def has_head(self) -> bool:
        return self.orig.head_class is not None

    # -- decoders with cross-attention (see .seq2seq) ----------------------------------------------------------------

    @property
    def cross_targets(self) -> list:
        """The seq2seq head and/or the causal head with encoder inputs, of both files (CrossTarget each)."""
        if not hasattr(self, "_cross_targets"):
            self._cross_targets = cross_targets(self.orig, self.migr, self.settings)
        return self._cross_targets

    def cross_pair(self, target, attn: str = "eager", *, torchscript: bool = False, fresh: bool = False):
        """(original, migrated) models of a CrossTarget with one shared state_dict; cached unless ``fresh``."""
        key = (target.kind, attn, torchscript)
        if fresh or key not in self._pairs:
            built = build_cross_pair(target, self.seed, attn, torchscript)
            if fresh:
                return built
            self._pairs[key] = built
        return self._pairs[key]

    def cross_unbuildable(self, target) -> str | None:
        """Why the ORIGINAL side of ``target`` cannot be built as a tiny model (MusicGen's seq2seq head wants a
        composite config of three sub-models), or None."""
        if target.kind not in self._buildable:
            try:
                build_original(target.orig, target.config(), self.seed)
                self._buildable[target.kind] = None
            except Exception as exc:  # noqa: BLE001
                self._buildable[target.kind] = f"no tiny model of the original: {one_line(exc)}"
        return self._buildable[target.kind]

    def states(self, target, model, batch: int = 2, salt: int = 0):
        """Random encoder states (batch, ENCODER_LEN, width) that both models of ``target`` attend to."""
        return encoder_states(self.seed, batch, target.width(model), salt=salt)

    # -- inputs ------------------------------------------------------------------------------------------------------

    def ids(self, batch: int, length: int, salt: int = 0):
        """Random token ids in [1, vocab_size - 1): 0 is the pad id, vocab_size - 1 is ImageGPT's start token."""
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1000 + salt)
        return torch.randint(1, self.vocab_size - 1, (batch, length), generator=generator)

    def prompt_and_steps(self, salt: int = 0):
        """A batch-2 prompt of PROMPT_LEN tokens and STEPS continuations: each the next token alone, or, for a model
        that is handed the whole sequence on every step (:attr:`refeeds`), the sequence up to that token."""
        tokens = self.ids(2, PROMPT_LEN + STEPS, salt)
        if self.refeeds:
            return tokens[:, :PROMPT_LEN], [tokens[:, : PROMPT_LEN + i + 1] for i in range(STEPS)]
        return tokens[:, :PROMPT_LEN], [tokens[:, PROMPT_LEN + i :][:, :1] for i in range(STEPS)]

    @property
    def refeeds(self) -> bool:
        """The original model takes the whole sequence again on a cached step (see :mod:`.steps`)."""
        if self._refeeds is None:
            try:
                original, _ = self.pair()
            except Exception:  # noqa: BLE001 - the checks report why no model could be built
                return False
            self._refeeds = refeeds_whole_sequence(original, self.ids(2, PROMPT_LEN + 1, salt=11))
        return self._refeeds

    def original_past(self, model, prompt):
        """The ORIGINAL model's returned past for ``prompt`` (legacy layout)."""
        return past(model(input_ids=prompt, use_cache=True))
