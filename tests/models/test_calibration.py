"""Random weights, realistic activations: every catalog vision model built with random weights
computes a real output (finite, non-zero, far from the denormal range), and the check that
says so fails the outputs that are not."""
import math

import numpy as np
import pytest
import torch

from benchmark_runners.output_check import check_output, smallest_normal
from models.calibration import batchnorm_layers
from models.catalog import load_catalog
from models.classifier import classify_spec
from models.inputs import input_signature
from models.loading import build
from models.resolve import resolve_model
from models.tensors import make_inputs

VISION = sorted(s.name for s in load_catalog().values() if classify_spec(s).family == "vision")


def test_the_catalog_has_the_vision_models_this_is_about():
    assert {"efficientnet-b0", "mobilenet-v2"} <= set(VISION)


@pytest.mark.parametrize("name", VISION)
def test_each_catalog_vision_model_with_random_weights_computes_a_real_output(name):
    spec = resolve_model(name)
    built = build(spec)
    with torch.inference_mode():
        out = built.model(**make_inputs(input_signature(spec, 2, None, None, None), "cpu"))[0]
    check = check_output(out)
    assert check.problem is None, f"{name}: {check.problem}"
    assert check.finite and check.zero_share < 0.5 and check.denormal_share == 0
    assert check.max_abs > 1e-3, f"{name}: output scale {check.max_abs:.3g}"
    assert "seed" in built.weights_recipe
    if batchnorm_layers(built.model):
        assert "BatchNorm" in built.weights_recipe
        assert all(float(bn.weight.detach().min()) == 1.0 for bn in batchnorm_layers(built.model) if bn.affine)


def test_two_builds_of_a_model_are_identical():
    """Seeded init and seeded calibration batches: two backends convert and time the same model."""
    spec = resolve_model("mobilenet-v2")
    a, b = build(spec).model.state_dict(), build(spec).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_output_check_fails_what_no_deployed_model_computes():
    assert check_output(torch.zeros(2, 10)).problem.startswith("all 20 output values are exactly zero")
    nan = torch.ones(4)
    nan[1] = float("nan")
    assert "1 of 4 output values are NaN" in check_output(nan).problem
    denormal = np.full(8, smallest_normal("float32") / 4, dtype=np.float32)
    assert "denormal" in check_output(denormal).problem
    vanished = torch.full((3,), 1e-22)  # MobileNet-v2's logits before calibration
    assert "vanished" in check_output(vanished).problem
    assert check_output(torch.tensor([0.5, -1.2, 0.0])).problem is None
    # bf16 keeps fp32's exponent range; fp16's normals start at 6.1e-5
    assert check_output(torch.full((2,), 1e-10, dtype=torch.bfloat16)).problem is None
    assert "denormal" in check_output(np.full(4, 1e-6, dtype=np.float16)).problem
    assert math.isclose(smallest_normal("float16"), 6.103515625e-05)


def test_the_output_check_counts_across_its_chunks():
    """The check scans a chunk at a time (a causal LM's logits are 10^8 values): a NaN in the
    last chunk, zeros and denormals spread over all of them count as in one pass."""
    from benchmark_runners.output_check import _CHUNK

    n = 3 * _CHUNK + 5
    values = np.ones(n, dtype=np.float32)
    values[-1] = float("nan")
    assert check_output(values).problem == f"1 of {n} output values are NaN or infinite"
    values[-1] = -7.5
    values[::50] = smallest_normal("float32") / 8  # 2% denormal, in every chunk
    values[1::10] = 0.0
    check = check_output(values)
    assert check.max_abs == 7.5 and math.isclose(check.zero_share, len(values[1::10]) / n)
    assert math.isclose(check.denormal_share, len(values[::50]) / (n - len(values[1::10])))
    assert "2% of the non-zero output values are denormal" in check.problem
