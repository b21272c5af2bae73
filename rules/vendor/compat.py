"""Small stand-ins, vendored by cachemigrate, for transformers helpers and config attributes that 5.x removed.
Written for cachemigrate."""


def is_torch_fx_available():
    """torch.fx can be used (vendored by cachemigrate; transformers 5.x removed this helper: every torch it
    supports, >= 2.6, has torch.fx)."""
    return True


def legacy_rope_theta(config):
    """`config.rope_theta` of a transformers 4.x config; 5.x keeps it in `config.rope_parameters["rope_theta"]`
    (vendored by cachemigrate)."""
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    return theta


def legacy_rope_scaling(config):
    """`config.rope_scaling` as a transformers 4.x config holds it: None, or a dict with "type" and "factor".
    On 5.x `rope_scaling` gives `rope_parameters`, whose "rope_type" "default" means no scaling (vendored by
    cachemigrate)."""
    scaling = getattr(config, "rope_scaling", None)
    if isinstance(scaling, dict) and "type" not in scaling and "rope_type" in scaling:
        if scaling["rope_type"] == "default":
            return None
        scaling = {**scaling, "type": scaling["rope_type"]}
    return scaling


def torch_float(x):
    """What transformers 4.x's `torch_float` gave: a float32 tensor while tracing, else `int(x)`. 5.x returns
    `float(x)` there, which changes what a file that divides by it computes (vendored by cachemigrate)."""
    import torch

    return x.to(torch.float32) if torch.jit.is_tracing() and isinstance(x, torch.Tensor) else int(x)
