"""The per-operator trace on meta tensors: FLOPs, bytes, lifetimes."""
import numpy as np
import pytest

from models.analysis import flops_per_sample, parameter_breakdown
from models.op_profile import CATEGORIES, GROUPED_CONV, LINEAR, MATMUL, VIEW, op_profile, training_peak_activation_bytes
from models.resolve import resolve_model


@pytest.mark.parametrize("name", ["bert-tiny", "mobilenet-v2", "whisper-tiny", "t5-small"])
def test_operator_flops_add_up_to_the_flop_counter(name):
    spec = resolve_model(name)
    assert op_profile(spec).flops.sum() == pytest.approx(flops_per_sample(spec), rel=1e-6)


def test_linear_weights_are_read_once_per_forward():
    spec = resolve_model("bert-tiny")
    prof = op_profile(spec)
    linear_weight_bytes = prof.weight_bytes[prof.category == LINEAR].sum()
    # nn.Linear weights and biases of bert-tiny, fp32; the pooler's too.
    assert linear_weight_bytes == pytest.approx(4 * parameter_breakdown(spec).linear, rel=0.02)
    # A gather reads the rows it returns: the 30522-token table is not streamed per forward.
    assert prof.weight_bytes.sum() < 4 * parameter_breakdown(spec).total / 2


def test_attention_is_the_fused_kernel_without_a_score_matrix():
    spec = resolve_model("whisper-tiny")
    prof = op_profile(spec)
    assert prof.counts()["matmul"] == 12  # 4 encoder + 4 decoder self + 4 cross attentions, one kernel each
    scores = 6 * 1500 * 1500 * 4  # heads x frames x frames fp32: what the math path would allocate
    assert prof.peak_activations(1) < scores


def test_depthwise_convolutions_are_grouped():
    prof = op_profile(resolve_model("mobilenet-v2"))
    assert prof.counts()["grouped_conv"] == 17 and (prof.category == GROUPED_CONV).any()
    assert set(prof.counts()) == set(CATEGORIES)


def test_training_keeps_saved_activations_alive():
    spec = resolve_model("bert-tiny")
    inference = op_profile(spec).peak_activations(4)
    first, per_sample = training_peak_activation_bytes(spec)
    assert first + 3 * per_sample > 2 * inference
    assert per_sample > 0


def test_batch_scaling_is_linear_in_activations_not_weights():
    prof = op_profile(resolve_model("bert-tiny"))
    flops, weights, acts = prof.at_batch(8)
    assert np.allclose(flops, prof.flops * 8) and np.allclose(weights, prof.weight_bytes) and np.allclose(acts, prof.activation_bytes * 8)
    assert (prof.output_rows[prof.category == MATMUL] > 0).all()


def _figures(spec, training: bool):
    if training:
        return training_peak_activation_bytes(spec)
    prof = op_profile(spec)
    return (prof.category.tobytes(), prof.flops.tobytes(), prof.weight_bytes.tobytes(), prof.activation_bytes.tobytes(),
            prof.peak_activation_bytes)


def test_traces_on_many_threads_match_one_thread_and_patch_nothing():
    """API requests trace on a thread pool: concurrent traces must give the single-threaded
    figures and never change torch's scaled_dot_product_attention (not even while tracing)."""
    import dataclasses
    import threading
    import time

    import torch
    import torch.nn.functional as F

    builtin = torch._C._nn.scaled_dot_product_attention
    assert F.scaled_dot_product_attention is builtin
    cases = [(name, training) for name in ("bert-tiny", "t5-small", "gpt2") for training in (False, True)]
    # Fresh names: the traces are not served from the cache other tests filled.
    alone = {c: _figures(dataclasses.replace(resolve_model(c[0]), name=f"{c[0]}-alone"), c[1]) for c in cases}
    barrier = threading.Barrier(2 * len(cases))
    results, errors, seen = {}, [], set()

    def work(i, case):
        try:
            barrier.wait()
            spec = dataclasses.replace(resolve_model(case[0]), name=f"{case[0]}-threads")
            results[(i, case)] = _figures(spec, case[1])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i, c)) for i in range(2) for c in cases]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        seen.add(F.scaled_dot_product_attention)
        time.sleep(0.001)  # sample, do not spin: the tracing threads need the core and the GIL
    for t in threads:
        t.join()
    assert not errors, errors
    assert seen == {builtin} and F.scaled_dot_product_attention is builtin
    assert all(results[(i, c)] == alone[c] for i in range(2) for c in cases)


def test_transcendental_elements_are_the_exponential_activations_outputs():
    """GELU, tanh, SiLU and sigmoid evaluate an exponential per element; ReLU6 does not."""
    bert = op_profile(resolve_model("bert-tiny"))
    # 2 layers x 128 tokens x 512 intermediate GELU outputs, plus the pooler's 128 tanh outputs
    assert bert.transcendental_elements.sum() == 2 * 128 * 512 + 128
    assert op_profile(resolve_model("mobilenet-v2")).transcendental_elements.sum() == 0  # ReLU6 only
    efficientnet = op_profile(resolve_model("efficientnet-b0"))
    assert (efficientnet.transcendental_elements > 0).sum() == 65  # 49 SiLU + 16 squeeze-excitation sigmoids
    assert np.all(efficientnet.transcendental_elements[efficientnet.category != 4] == 0)  # only element-wise ops


def test_a_batch_1_figure_takes_one_trace_and_a_larger_batch_the_second(monkeypatch):
    """The batch-2 trace only gives the per-sample growth of the peak: a batch-1 question (the
    catalog, a selection cell at batch 1) never pays for it, and a later batch-4 question gets
    the same figures an eager profile gave."""
    from models import op_profile as module

    spec = resolve_model("bert-tiny")
    calls = []
    real = module._trace
    monkeypatch.setattr(module, "_trace", lambda s, sig, *a, **k: calls.append(sig.batch_size) or real(s, sig, *a, **k))
    monkeypatch.setattr(module, "_profiles", module.BoundedCache(8))
    monkeypatch.setattr(module, "_per_sample_peaks", module.BoundedCache(8))
    prof = module.op_profile(spec)
    one = prof.peak_activations(1)
    assert calls == [1] and one > 0
    four = prof.peak_activations(4)
    assert calls == [1, 2]
    first, per_sample = prof.peak_activation_bytes
    assert first == one and per_sample > 0 and four == pytest.approx(one + 3 * per_sample)
    prof.peak_activations(16)
    assert calls == [1, 2]  # the growth is cached with the profile's key


def test_what_a_graph_compiler_fuses_follows_a_convolution_or_gemm():
    """MobileNet-v2: every BatchNorm, ReLU6 and residual add follows a convolution, every zero pad
    feeds one and BatchNorm's allocations launch nothing, so all its element-wise operators are
    fused but the final mean. In bert-tiny what reads a dense layer's output is (its GELUs, the
    pooler's tanh, the residual adds), and the embeddings' sum and the five LayerNorms are not."""
    from models.op_profile import OTHER

    mobilenet = op_profile(resolve_model("mobilenet-v2"))
    other = mobilenet.category == OTHER
    assert int(other.sum()) == 202 and int((mobilenet.fused[other] > 0).sum()) == 201
    assert np.all(mobilenet.fused[mobilenet.category != OTHER] == 0)  # producers are never fused themselves
    bert = op_profile(resolve_model("bert-tiny"))
    fused = bert.fused > 0
    assert 0 < int(fused.sum()) < int((bert.category == OTHER).sum())
    assert bert.transcendental_elements[fused].sum() == 2 * 128 * 512 + 128 and bert.transcendental_elements[~fused].sum() == 0
    assert int(((bert.category == OTHER) & ~fused).sum()) >= 5 + 1 + 3  # LayerNorms, the embeddings' adds and gathers


def test_fusion_stops_where_an_op_of_its_own_reads_the_output_and_a_pad_read_by_another_op_stays_a_copy():
    """A residual add after a linear layer fuses; the RMS norm's multiply after a mean of the same
    stream does not (the stream is written out for the mean). A zero pad that something else
    reads before the convolution stays a copy; one only the convolution reads becomes its padding."""
    import torch

    from models.op_tracer import storage_key, tracer_class

    linear, conv = torch.nn.Linear(8, 8, device="meta"), torch.nn.Conv2d(3, 4, 3, device="meta")
    x, image = torch.zeros(2, 8, device="meta"), torch.zeros(1, 3, 8, 8, device="meta")
    tracer = tracer_class()({storage_key(p) for p in [*linear.parameters(), *conv.parameters()]})
    with tracer:
        h = x + linear(x)
        h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        padded = torch.nn.functional.pad(image, (1, 1, 1, 1))
        padded + 1
        conv(padded)
        torch.relu(conv(torch.nn.functional.pad(image, (1, 1, 1, 1))))
    rows = [(int(r[0]), r[7]) for r in tracer.rows if r[0] != VIEW]
    # addmm, add | pow, mean, add, rsqrt, mul | pad, add, conv | pad, conv, relu
    assert [fused for _, fused in rows] == [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1], rows
