"""Head-pruning helpers of ``transformers.pytorch_utils``, vendored by cachemigrate: transformers 5.x removed them
(and ``PreTrainedModel.prune_heads``). Written for cachemigrate; they behave as the transformers 4.51 functions."""

import torch

from transformers.pytorch_utils import Conv1D


def find_pruneable_heads_and_indices(heads, n_heads, head_size, already_pruned_heads):
    """The heads still to prune, and the indices of the rows (heads x head_size, flattened) that stay (vendored by
    cachemigrate; transformers 5.x removed it)."""
    keep = torch.ones(n_heads, head_size)
    heads = set(heads) - already_pruned_heads
    for head in heads:
        keep[head - sum(1 for pruned in already_pruned_heads if pruned < head)] = 0
    keep = keep.view(-1).contiguous().eq(1)
    return heads, torch.arange(len(keep))[keep].long()


def prune_conv1d_layer(layer, index, dim=1):
    """A `Conv1D` keeping only the entries `index` of its weight along `dim` (vendored by cachemigrate;
    transformers 5.x removed it)."""
    index = index.to(layer.weight.device)
    weight = layer.weight.index_select(dim, index).clone().detach()
    bias = layer.bias.clone().detach() if dim == 0 else layer.bias[index].clone().detach()
    size = list(layer.weight.size())
    size[dim] = len(index)
    pruned = Conv1D(size[1], size[0]).to(layer.weight.device)
    with torch.no_grad():
        pruned.weight.copy_(weight.contiguous())
        pruned.bias.copy_(bias.contiguous())
    return pruned
