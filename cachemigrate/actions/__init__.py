"""The action vocabulary. Each rule file names one of these and configures it with ``params``."""

from __future__ import annotations

from .add_base_class import AddBaseClass
from .add_method import AddMethod
from .add_parameter import AddParameter
from .base import Action, ActionContext
from .cache_edits import EditCacheConsumer
from .computed_weight import FillComputedWeight
from .dict_parts import DictParts
from .drop_import import DropImport
from .drop_override import DropOverride
from .generate_cache import GenerateCache
from .insert_statements import InsertStatements
from .pass_argument import PassArgument
from .post_init import CallPostInit
from .refuse_library_stack import RefuseLibraryStack
from .refuse_parameter import RefuseParameter
from .refuse_passed_with import InsertAfterPassedWith, RefusePassedWith
from .refuse_signature import RefuseSignature
from .rename_keyword import RenameKeyword
from .reorder_each_tensor import ReorderEachTensor
from .rename_parameter import RenameParameter
from .replace_class_statements import ReplaceClassStatements
from .replace_expression import ReplaceExpression
from .replace_statements import ReplaceStatements
from .set_class_attribute import SetClassAttribute
from .thread_layer_idx import ThreadLayerIdx
from .tie_list import TiedWeightsList
from .tie_retie import RetieWeights
from .tie_weights_keywords import TieWeightsKeywords
from .tie_weights_mapping import TieWeightsMapping

ACTIONS: dict[str, type[Action]] = {
    cls.name: cls
    for cls in (
        ReplaceExpression,
        ReplaceStatements,
        InsertStatements,
        AddParameter,
        SetClassAttribute,
        ThreadLayerIdx,
        PassArgument,
        RefusePassedWith,
        InsertAfterPassedWith,
        RefuseSignature,
        RefuseParameter,
        RefuseLibraryStack,
        AddMethod,
        RenameParameter,
        RenameKeyword,
        AddBaseClass,
        DropImport,
        DropOverride,
        CallPostInit,
        ReplaceClassStatements,
        TieWeightsMapping,
        TieWeightsKeywords,
        EditCacheConsumer,
        DictParts,
        FillComputedWeight,
        TiedWeightsList,
        RetieWeights,
        GenerateCache,
        ReorderEachTensor,
    )
}

__all__ = ["ACTIONS", "Action", "ActionContext"]
