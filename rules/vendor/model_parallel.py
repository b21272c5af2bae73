"""The device-map helpers of ``transformers.utils.model_parallel_utils``, vendored by cachemigrate: transformers 5.x
removed the module (and the ``parallelize()`` API it served). Written for cachemigrate; they behave as the
transformers 4.51 functions."""


def assert_device_map(device_map, num_blocks):
    """Raise ValueError unless `device_map` ({device: [block, ...]}) names each of `num_blocks` blocks once
    (vendored by cachemigrate; transformers 5.x removed `model_parallel_utils`)."""
    named = [block for blocks in device_map.values() for block in blocks]
    duplicates = sorted({block for block in named if named.count(block) > 1}, key=named.index)
    missing = [block for block in range(num_blocks) if block not in named]
    extra = [block for block in named if block not in range(num_blocks)]
    if duplicates:
        raise ValueError(
            "Duplicate attention blocks specified in device_map. Attention blocks must be specified to one device. "
            "These attention blocks were specified more than once: " + str(duplicates)
        )
    if missing:
        raise ValueError(
            "There are attention blocks for this model that are not specified in the device_map. Add these attention "
            "blocks to a device on the device_map: " + str(missing)
        )
    if extra:
        raise ValueError(
            "The device_map contains more attention blocks than this model has. Remove these from the device_map:"
            + str(extra)
        )


def get_device_map(n_layers, devices):
    """Layers split evenly over `devices`, in order: {device: [layer, ...]} (vendored by cachemigrate;
    transformers 5.x removed `model_parallel_utils`)."""
    per_device = -(-n_layers // len(devices))  # rounded up
    layers = list(range(n_layers))
    return dict(zip(devices, [layers[start : start + per_device] for start in range(0, n_layers, per_device)]))
