"""Diagnostics: what the tool tells a user about a file, as ``path:line:col: CODE message``."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, order=True)
class Diagnostic:
    """A message about a file, located at ``path:line:column``, with its code (``CM900``...)."""

    path: str
    line: int
    column: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# Codes the engine itself emits (rules emit their own ids).
UNKNOWN_IDIOM = "CM900"  # a legacy use of the cache that no rule rewrote
# the end of a CM900 for an idiom no rule of any era rewrites (edit/suppressed.py and rules/withdrawn.py put what
# they know in its place)
NO_RULE = (
    "and no rule rewrites this idiom; the file was left unchanged. Migrate this statement by hand or add a rule for it"
)
RULE_NOT_APPLIED = "CM901"  # a required rule found nothing to rewrite in its role
PARSE_ERROR = "CM902"  # the file is not valid Python
NO_ROLES = "CM903"  # legacy cache code was found but the attention/block/model roles were not
# Codes of reading and writing files (cachemigrate.source.decode, cachemigrate.source.writing).
UNREADABLE = "CM904"  # not text, an unknown or wrong encoding, or an I/O error on reading: left unchanged
READ_ONLY = "CM905"  # the file (or the target of its symlink) is read-only: not rewritten
UNWRITABLE = "CM906"  # writing the migrated file failed (or it cannot be encoded back): left unchanged
SUPPRESSED = "CM907"  # `# cachemigrate: skip` on a statement left edits out, and the file cannot do without them
TOO_DEEP = "CM910"  # an expression nested too deep for the engine (or for Python's parser): left unchanged
CHANGED_MEANWHILE = "CM909"  # the file changed on disk while it was being migrated: left as it is now
REMOVED_API = "CM908"  # the migrated file would import or call what the era's runtime removed: left unchanged
# A note on a migrated file: it reads a config attribute its era's runtime no longer sets by default, and its config
# class does not set it (cachemigrate.proof.config_defaults)
CONFIG_DEFAULT = "CM911"
# A note on a migrated file: the module it takes its config from imports what the era's runtime removed
COMPANION_REMOVED = "CM912"
# A note on a migrated file: --fix-past-hook renamed a generation hook's `past` to `past_key_values`
# (cachemigrate.edit.past_hook)
PAST_HOOK_FIXED = "CM913"
# A note on a migrated file for a 5.x runtime: a forward updates in place an input that 5.x's generate() keeps and
# extends between steps (position_ids += offset), so generation drifts there (cachemigrate.proof.generate_inputs)
IN_PLACE_INPUT = "CM914"
# A note on a migrated file: it reads a config attribute that transformers' own config class it uses sets to one value
# whatever it is given on the era's runtime (5.x's T5Config.tie_word_embeddings; cachemigrate.proof.forced_config)
FORCED_CONFIG = "CM915"
# A module-level function with tuple-cache code is set on a class whose cache contract is not known: not imported
# from transformers, or no library attention (cachemigrate.facts.patches)
PATCH_TARGET = "CM916"
# A past kept as a dict of attention parts per layer (fairseq style): recognised as an EncoderDecoderCache's roles,
# refused at its first blocker (cachemigrate.facts.dict_blocker)
DICT_LAYOUT = "CM917"
# A package (sibling modules analysed together, cachemigrate.facts.package) that cannot be analysed as one model: an
# import cycle, a class defined twice, the cache handed to a class imported from outside it
PACKAGE = "CM920"
# A note on a file named alone whose model spans its siblings: it was migrated with them (cachemigrate.cli.package)
WITH_SIBLINGS = "CM921"
# A note, not an error: legacy cache code that no model class of the file can hand a cache to (the file is left as it
# is and counts as having nothing to migrate; in the encoder-decoder family's range of codes)
UNREACHABLE = "CM299"
REGION_VIOLATION = "CM999"  # internal: the result changed outside what the rules claimed (or does not parse)
