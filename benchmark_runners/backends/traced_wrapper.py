"""The torch module that converted backends (OpenVINO, the browser's ONNX files) trace, and
torch's own outputs that their results are checked against.

`NamedInputs` wraps a Hugging Face model so that a trace sees positional tensors in and one tensor
out: inputs by name, the key/value cache off (a single forward pass has no use for it, and its
cache objects cannot be traced), the first output. `torch_output_in` is torch's own forward with
the weights in a reduced precision, which sets how far a converted model in that precision may
be from torch's fp32 output.
"""
from __future__ import annotations

import inspect
from typing import Any


def recipe_source() -> str:
    """The code that shapes a traced model (the wrapper and its graph adaptations), for the cache
    keys of what is converted from it: a file made by an older recipe is never reused."""
    return inspect.getsource(NamedInputs) + inspect.getsource(_global_pool_for_oversized_avg_pools)


class NamedInputs:
    """Wraps a Hugging Face model so a trace sees positional tensors in, one tensor out."""

    def __new__(cls, model, names: list[str]):
        import torch

        class _Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model
                params = inspect.signature(model.forward).parameters
                self.fixed = {"use_cache": False} if "use_cache" in params else {}
                # transformers builds the decoder mask from position ids when none is given, with
                # an aten::diff that OpenVINO cannot convert; an all-ones mask is the same mask.
                self.ones_decoder_mask = ("decoder_input_ids" in names and "decoder_attention_mask" not in names
                                          and "decoder_attention_mask" in params)

            def forward(self, *tensors):
                kwargs = dict(zip(names, tensors))
                if self.ones_decoder_mask:
                    kwargs["decoder_attention_mask"] = torch.ones_like(kwargs["decoder_input_ids"])
                return self.model(**kwargs, **self.fixed, return_dict=True)[0]

        pools = _global_pool_for_oversized_avg_pools(model)
        wrapper = _Wrapper().eval()
        wrapper.adaptations = [*(["use_cache=False"] if wrapper.fixed else []),
                               *(["decoder_attention_mask = ones"] if wrapper.ones_decoder_mask else []),
                               *([f"{pools} AvgPool2d with a kernel over the whole feature map traced as global average "
                                  "pooling (what torch computes; OpenVINO refuses a kernel larger than its input)"] if pools else [])]
        return wrapper


def _global_pool_for_oversized_avg_pools(model) -> int:
    """Hugging Face's EfficientNet pools with AvgPool2d(kernel=1280, ceil_mode=True) over a 7x7
    map: torch averages the whole map, OpenVINO rejects the kernel. Each such pool is wrapped to
    call adaptive_avg_pool2d(x, 1) when its kernel covers the input, the same numbers (the
    output check compares them with torch's). Returns how many were wrapped."""
    import torch

    class GlobalWhenOversized(torch.nn.Module):
        def __init__(self, pool):
            super().__init__()
            self.pool = pool

        def forward(self, x):
            k = self.pool.kernel_size if isinstance(self.pool.kernel_size, tuple) else (self.pool.kernel_size,) * 2
            if k[0] >= x.shape[-2] and k[1] >= x.shape[-1]:
                return torch.nn.functional.adaptive_avg_pool2d(x, 1)
            return self.pool(x)

    wrapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if (isinstance(child, torch.nn.AvgPool2d) and child.ceil_mode and child.padding in (0, (0, 0))
                    and child.count_include_pad):
                setattr(parent, name, GlobalWhenOversized(child))
                wrapped += 1
    return wrapped


def torch_output_in(wrapper, example: dict[str, Any], precision: str):
    """torch's own first output with weights and floating inputs in `precision` (a copy of the
    model), as float32 numpy; None where torch cannot run that precision here."""
    import copy

    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    try:
        cast = copy.deepcopy(wrapper).to(dtype)
        inputs = [t.to(dtype) if t.is_floating_point() else t for t in example.values()]
        with torch.no_grad():
            return cast(*inputs).float().numpy()
    except (RuntimeError, NotImplementedError):
        return None
