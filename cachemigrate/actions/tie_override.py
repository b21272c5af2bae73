"""Whether a model's own ``tie_weights`` leaves its output embeddings untied (for :mod:`.tie_sources`).

4.x's ``PreTrainedModel.tie_weights`` ties ``get_output_embeddings()`` to ``get_input_embeddings()`` when
``config.tie_word_embeddings`` is true; a class that overrides ``tie_weights`` replaces that tie with what its
override does. When the override is read to its end and cannot reach the output embeddings, 4.x never tied them at
the class's level, whatever the config says: it calls no ``tie_weights`` (its base's) and no getter, and its only
calls are 4.x's tying helpers -- ``self._tie_or_clone_weights(a, b)`` (which sets ``a``'s weight; those that tie are
read as the class's own ties) and ``self._tie_encoder_decoder_weights(a, b, ...)`` (which sets the parameters under
``a`` to those under ``b``), each with an ``a`` that does not hold the output embeddings -- or the builtins
``getattr``/``hasattr``/``isinstance``; and every attribute it assigns is a ``self.<path>`` that neither holds nor
lies in the output embeddings nor ends in ``.weight``/``.bias``. A sub-model's own ties (its ``post_init`` tied its
output embeddings as it was built) are its own, in its own mapping, which 5.x reads with its prefix.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from .tie_code import method_locals, self_path, substituted

_BUILTINS = ("getattr", "hasattr", "isinstance")
_SETTERS = ("_tie_or_clone_weights", "_tie_encoder_decoder_weights")  # each sets what its first argument holds


def _overlaps(path: str, output: str) -> bool:
    return path == output or output.startswith(path + ".") or path.startswith(output + ".")


def override_leaves_untied(sources, name: str, output: str) -> bool:
    """Whether the ``tie_weights`` that class ``name`` uses (its own or a base's of the file) cannot tie its output
    embeddings, at the dotted path ``output`` (see the module's docstring)."""
    method = sources.method(name, "tie_weights")
    if method is None:
        return False
    body = substituted(method.body, method_locals(method))
    if findall(body, m.AssignTarget(m.Name("self"))):
        return False  # `self` rebound: `self.x` is another module's after it
    for call in findall(body, m.Call()):
        if m.matches(call.func, m.Name()) and call.func.value in _BUILTINS:
            continue
        if not m.matches(call.func, m.Attribute(m.Name("self"), m.Name())) or call.func.attr.value not in _SETTERS:
            return False
        first = sources.path_of(name, call.args[0].value) if call.args and not call.args[0].star else None
        if first is None or _overlaps(first, output):
            return False
    targets = [t.target for t in findall(body, m.AssignTarget() | m.AugAssign() | m.AnnAssign())]
    for target in targets:
        if isinstance(target, cst.Name):
            continue  # a local name
        path = self_path(target)
        if path is None or _overlaps(path, output) or path.rsplit(".", 1)[-1] in ("weight", "bias"):
            return False
    return True
