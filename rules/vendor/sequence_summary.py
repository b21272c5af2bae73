"""``SequenceSummary``, vendored by cachemigrate: transformers 4.53 removed it from ``modeling_utils``.

Written for cachemigrate. It behaves as the transformers 4.51 class and has the same submodules (``summary``,
``activation``, ``first_dropout``, ``last_dropout``), so checkpoints load unchanged."""

import torch

from transformers.activations import ACT2FN


class SequenceSummary(torch.nn.Module):
    """One vector per sequence from the last hidden states (vendored by cachemigrate; transformers 4.53 removed
    `modeling_utils.SequenceSummary`).

    `config.summary_type`: "last" (default), "first", "mean" or "cls_index" (the token at `cls_index`, else the
    last one); then `summary_first_dropout`, a projection if `summary_use_proj` (to `num_labels` classes if
    `summary_proj_to_labels`, else to `hidden_size`), the `summary_activation` and `summary_last_dropout`."""

    def __init__(self, config):
        super().__init__()
        self.summary_type = getattr(config, "summary_type", "last")
        if self.summary_type == "attn":
            raise NotImplementedError("summary_type='attn' is not implemented")
        self.summary = torch.nn.Identity()
        if getattr(config, "summary_use_proj", False):
            to_labels = getattr(config, "summary_proj_to_labels", False) and config.num_labels > 0
            self.summary = torch.nn.Linear(config.hidden_size, config.num_labels if to_labels else config.hidden_size)
        activation = getattr(config, "summary_activation", None)
        self.activation = ACT2FN[activation] if activation else torch.nn.Identity()
        first, last = getattr(config, "summary_first_dropout", 0), getattr(config, "summary_last_dropout", 0)
        self.first_dropout = torch.nn.Dropout(first) if first and first > 0 else torch.nn.Identity()
        self.last_dropout = torch.nn.Dropout(last) if last and last > 0 else torch.nn.Identity()

    def forward(self, hidden_states, cls_index=None):
        if self.summary_type == "last":
            output = hidden_states[:, -1]
        elif self.summary_type == "first":
            output = hidden_states[:, 0]
        elif self.summary_type == "mean":
            output = hidden_states.mean(dim=1)
        elif self.summary_type == "cls_index":
            if cls_index is None:
                index = torch.full_like(hidden_states[..., :1, :], hidden_states.shape[-2] - 1, dtype=torch.long)
            else:
                index = cls_index.unsqueeze(-1).unsqueeze(-1)
                index = index.expand((-1,) * (index.dim() - 1) + (hidden_states.size(-1),))
            output = hidden_states.gather(-2, index).squeeze(-2)
        else:
            raise NotImplementedError(f"summary_type={self.summary_type!r}")
        output = self.first_dropout(output)
        output = self.summary(output)
        output = self.activation(output)
        return self.last_dropout(output)
