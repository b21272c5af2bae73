"""``get_parameter_device``, vendored by cachemigrate: transformers 5.x removed it from ``modeling_utils`` (4.x
releases up to 4.57 have it). Written for cachemigrate; it behaves as the transformers 4.51 function."""

import torch


def get_parameter_device(parameter):
    """The device of the first parameter of the module `parameter`, else of its first tensor attribute (a module
    without parameters); StopIteration when it has neither (vendored by cachemigrate; transformers 5.x removed
    `modeling_utils.get_parameter_device`)."""
    for weight in parameter.parameters():
        return weight.device
    for module in parameter.modules():
        for value in module.__dict__.values():
            if torch.is_tensor(value):
                return value.device
    raise StopIteration
