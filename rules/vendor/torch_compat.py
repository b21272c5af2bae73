"""Torch version helpers of ``transformers.pytorch_utils`` that later transformers removed, vendored by cachemigrate.
Written for cachemigrate; they give what the transformers 4.20-4.30 ones gave on every torch the eras run on."""

import torch

is_torch_greater_or_equal_than_1_10 = True  # vendored by cachemigrate: the torch of every era is 1.10 or later


def torch_int_div(tensor1, tensor2):
    """Integer division rounding down, as ``//`` did on torch < 1.8 (vendored by cachemigrate; transformers 4.31
    removed it)."""
    return torch.div(tensor1, tensor2, rounding_mode="floor")


def isin_mps_friendly(elements, test_elements):
    """Whether each of ``elements`` is in ``test_elements`` (a tensor or an int), as ``torch.isin`` (vendored by
    cachemigrate; transformers 5.x removed it from ``pytorch_utils``; its MPS branch served torch < 2.4 only)."""
    return torch.isin(elements, test_elements)
