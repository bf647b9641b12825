"""The tracer behind models.op_profile: operator categories, and the dispatch mode that records
each aten operator of a forward pass on meta tensors (FLOPs, weight and activation bytes, a
GEMM's M and K, transcendental elements) while following the peak of live activation memory.
Apart from op_profile so that what is recorded per operator, and how, reads in one place; the
profile's caching and public figures stay there.

Each operator also says whether a graph compiler runs it inside another kernel or not at all
(`fused`): an element-wise op whose input is a GEMM's or convolution's output, or the output of
another such op after it (`_POST_OPS`: BatchNorm folded into the convolution, ReLU6 and the
residual add applied as the convolution writes its output), a zero pad that only feeds a
convolution (`_PADS`), and an empty allocation (`_ALLOCATIONS`). Eager torch runs each as a kernel
of its own, most with a pass over memory; OpenVINO's CPU plugin runs them inside their producer.
MobileNet-v2's 255 eager kernels are 52 convolutions, 52 pads, 52 BatchNorms with their 52
allocations, 35 ReLU6, 10 adds, a mean and a linear layer; on OpenVINO, about the convolutions,
the mean and the linear layer. The roofline that charged every one of them a kernel and a memory
pass predicted it 1.5x too slow on OpenVINO even fitted on its own rows (2-core AMD EPYC, make
run 39): devicefit.predict.operator_roofline's fused_share.
"""
from __future__ import annotations

import weakref

# Operator categories, each with its own achieved rate on a device.
LINEAR = 0  # matmul against a weight: the part int8 dynamic quantization replaces
MATMUL = 1  # matmul between activations (attention scores and values)
CONV = 2  # dense convolution (groups == 1)
GROUPED_CONV = 3  # grouped / depthwise convolution
OTHER = 4  # element-wise, normalization, softmax, pooling, gathers: bandwidth-bound
VIEW = 5  # no data moves: a dispatch and a new tensor header
CATEGORIES = ("linear", "matmul", "conv", "grouped_conv", "other", "view")

_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"}
# Element-wise ops that evaluate an exponential (or erf/tanh) per element: on a CPU each element
# costs a polynomial, not a load, so a large map can make them compute-bound (EfficientNet's SiLU
# over every expanded map; GELU in transformer FFNs; sigmoid gates). ReLU, ReLU6 and hardswish
# are comparisons and multiply-adds: bandwidth-bound like any other element-wise op.
_TRANSCENDENTAL = {"silu", "gelu", "sigmoid", "tanh", "exp", "erf", "_softmax", "softmax", "_log_softmax",
                   "log_softmax", "_safe_softmax", "logsigmoid", "mish", "elu", "softplus", "log", "expm1"}
# Element-wise ops a graph compiler applies as post-ops of the GEMM or convolution that produced
# their input: inference BatchNorm (a per-channel scale and shift), activations, and binary ops
# against another tensor (a residual add, a gate's multiply). Reductions, normalizations over a
# row (LayerNorm, softmax), pooling and gathers are kernels of their own everywhere.
_POST_OPS = {"_native_batch_norm_legit_no_training", "native_batch_norm", "_native_batch_norm_legit", "batch_norm",
             "relu", "relu6", "hardtanh", "clamp", "clamp_min", "clamp_max", "silu", "gelu", "sigmoid", "tanh",
             "hardswish", "hardsigmoid", "elu", "leaky_relu", "mish", "softplus", "add", "sub", "mul", "div"}
_PRODUCERS = {LINEAR, MATMUL, CONV, GROUPED_CONV}
# A zero pad that only feeds a convolution becomes the convolution's own padding (transformers'
# MobileNet-v2 pads every convolution's input in eager torch, a copy of the whole map), and a
# bare allocation (BatchNorm's empty statistics in inference) is no kernel in a compiled graph.
_PADS = {"constant_pad_nd"}
_ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty"}
_ATTENTION = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention", "scaled_dot_product_attention"}



def _inner_dimension(name: str, category: int, args) -> float:
    """The GEMM's K: the reduction length each output sums over (in_features; input channels per
    group x kernel area). A short K gives each loaded tile little work. A fused attention's is
    its key length: the softmax-weighted sum over the keys, and the length of the key blocks its
    kernel tiles; the head size is the same 64 at 128 tokens and at Whisper's 1,500, where the
    kernel ran at twice the rate per FLOP."""
    if category == LINEAR or (category == MATMUL and name not in _ATTENTION):
        a = args[1] if name in ("addmm", "baddbmm") else args[0]
        return float(a.shape[-1])
    if category == MATMUL:
        return float(args[1].shape[-2]) if len(args) > 1 and getattr(args[1], "dim", lambda: 0)() >= 2 else float(args[0].shape[-1])
    if category in (CONV, GROUPED_CONV):
        w = args[1]
        area = 1
        for d in w.shape[2:]:
            area *= d
        return float(w.shape[1] * area)
    return 0.0


def _output_rows(category: int, tensors_out) -> float:
    """The GEMM's M: output rows (tokens x batch, or output pixels x batch for a convolution).
    Small M leaves vector units idle, so achieved rate grows with it."""
    if not tensors_out or category not in (LINEAR, MATMUL, CONV, GROUPED_CONV):
        return 0.0
    out = tensors_out[0]
    channels = out.shape[1] if category in (CONV, GROUPED_CONV) and out.dim() > 1 else out.shape[-1]
    return float(out.nelement() / max(channels, 1))


def storage_key(t) -> int:
    return t.untyped_storage()._cdata


def tracer_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    class OperatorTracer(TorchDispatchMode):
        def __init__(self, weight_storages: set[int]):
            super().__init__()
            self.weights = weight_storages
            self.rows: list[tuple[int, float, float, float, float, float, float, float]] = []
            self.live: dict[int, list[int]] = {}  # storage -> [tensor objects alive, bytes]
            # Storages a GEMM or convolution wrote, or a post-op fused after one: an element-wise
            # op reading one of them can be fused into that producer (_POST_OPS).
            self.fusible: set[int] = set()
            self.pads: dict[int, int] = {}  # storage a zero pad wrote -> that pad's row
            self.live_bytes = 0
            self.peak = 0

        def _release(self, key: int) -> None:
            entry = self.live.get(key)
            if entry is None:
                return
            entry[0] -= 1
            if entry[0] <= 0:
                self.live_bytes -= entry[1]
                del self.live[key]
                self.fusible.discard(key)  # the address may hold another tensor next
                self.pads.pop(key, None)

        def _category(self, name: str, args, tensors_in) -> int:
            if name in _MATMULS:
                return LINEAR if any(storage_key(t) in self.weights for t in tensors_in) else MATMUL
            if name in _ATTENTION:
                return MATMUL
            if name == "convolution":
                groups = args[8] if len(args) > 8 else 1
                return GROUPED_CONV if groups > 1 else CONV
            return OTHER

        def _fused(self, name: str, category: int, args, in_keys: set[int], written: int) -> bool:
            """Whether a graph compiler runs this op inside another kernel or not at all (see the
            module docstring), and what its reading `in_keys` leaves fusible: a storage an op of
            its own reads must be written out, so nothing after can fuse into its producer (T5's
            RMS norm multiplies the residual stream after a mean), and a pad read by anything
            but a convolution stays a copy."""
            if category in (CONV, GROUPED_CONV) and (pad := self.pads.pop(storage_key(args[0]), None)) is not None:
                self.rows[pad] = (*self.rows[pad][:-1], 1.0)  # the pad becomes this convolution's padding
            activations = in_keys - self.weights
            fused = category == OTHER and ((name in _ALLOCATIONS and written == 0)
                                           or (name in _POST_OPS and bool(activations & self.fusible)))
            if not fused:
                self.fusible -= activations
            for key in activations:
                self.pads.pop(key, None)
            return fused

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            tensors_in = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            tensors_out = [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
            packet = func._overloadpacket
            name = packet.__name__
            in_keys = {storage_key(t) for t in tensors_in}
            is_view = bool(tensors_out) and all(storage_key(t) in in_keys for t in tensors_out)
            written = 0
            new_storages: list[int] = []
            for t in tensors_out:
                key = storage_key(t)
                if key in self.live:
                    self.live[key][0] += 1
                elif key not in in_keys and key not in self.weights:
                    nbytes = t.untyped_storage().nbytes()
                    written += t.nelement() * t.element_size()
                    new_storages.append(key)
                    self.live[key] = [1, nbytes]
                    self.live_bytes += nbytes
                else:
                    continue
                weakref.finalize(t, self._release, key)
            self.peak = max(self.peak, self.live_bytes)
            if is_view:
                self.rows.append((VIEW, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
                return out
            if name in _ATTENTION:
                q, k, v = args[:3]
                flops = 2.0 * q.nelement() / q.shape[-1] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
            elif packet in flop_registry:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            else:
                flops = 0.0
            weight = 0.0
            activation = float(written)
            for t in tensors_in:
                nbytes = t.nelement() * t.element_size()
                if storage_key(t) in self.weights:
                    # A gather reads the rows it returns, not the whole table.
                    weight += written if name == "embedding" else nbytes
                else:
                    activation += nbytes
            category = self._category(name, args, tensors_in)
            special = float(sum(t.nelement() for t in tensors_out)) if name in _TRANSCENDENTAL else 0.0
            fused = self._fused(name, category, args, in_keys, written)
            if fused or category in _PRODUCERS:
                self.fusible.update(new_storages)
            if _is_zero_pad(name, args) and len(new_storages) == 1:
                self.pads[new_storages[0]] = len(self.rows)
            self.rows.append((category, flops, weight, activation, _output_rows(category, tensors_out),
                              _inner_dimension(name, category, args), special, float(fused)))
            return out

    return OperatorTracer


def _is_zero_pad(name: str, args) -> bool:
    """A constant pad of zeros that only widens the spatial dimensions (its pairs cover at most
    the dimensions after batch and channels; none negative, which would crop): what a convolution's
    own padding does."""
    if name not in _PADS or (len(args) > 2 and args[2]):
        return False
    pad = list(args[1]) if len(args) > 1 else []
    return bool(pad) and all(p >= 0 for p in pad) and len(pad) <= 2 * max(args[0].dim() - 2, 0)


def _fused_attention(original, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False):
    """scaled_dot_product_attention as the eager CPU (and GPU) run executes it: one fused
    kernel that never materializes the score matrix. On meta, torch would otherwise pick the
    math fallback (bmm, softmax, bmm), whose memory and operator count are not what runs."""
    import torch

    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        # The fused CPU kernel cannot differentiate a learned bias (T5): torch runs the math path.
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    return out


def fused_attention_mode():
    """A torch function mode that routes scaled_dot_product_attention to `_fused_attention`.

    Why a mode and not a patched `F.scaled_dot_product_attention`: torch keeps function modes per
    thread, so a trace on one thread never changes what another thread (an API request, a
    benchmark) calls, and nothing global is left behind if a trace fails. Every other function
    passes through untouched. While `__torch_function__` runs, torch disables the mode, so the
    calls it makes (the original function, the fused kernel) are not intercepted again."""
    import torch
    from torch.overrides import TorchFunctionMode

    sdpa = torch._C._nn.scaled_dot_product_attention  # the builtin itself, whatever F's attribute holds now

    class FusedAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is sdpa:
                return _fused_attention(func, *args, **kwargs)
            return func(*args, **kwargs)

    return FusedAttention()
