"""Hardware-aware test generation (spec 003): one Jinja2 template per model family renders a
pytest file that builds the model through the ResourcePool on the recommended (or forced)
device, feeds a valid batch for its modality and checks output shapes and dtypes; absent
hardware skips with detection's reason.

The template and the resource requirements come from the hardware-aware classification, which
needs a published predictor. Without one, the family classifier alone picks the template, the
best torch device present is the recommendation, and the file says so rather than inventing
requirements.
"""
from __future__ import annotations

import ast
import hashlib
import logging
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devicefit.errors import DevicefitError
from devicefit.testgen.literals import python_docstring, python_literal, safe_file_stem
from devicefit.testgen.naming import FAMILY_NAMES, TEMPLATE_DIR, template_file, template_for_family

FAMILIES = FAMILY_NAMES
GENERATED_BATCH = 2
log = logging.getLogger("devicefit.testgen")


class TestGenerationError(DevicefitError, ValueError):
    """A model the generator cannot write a test for, said in words."""

    __test__ = False  # not a pytest test class, despite its name


@dataclass
class GeneratedTest:
    path: Path
    model: str
    family: str
    template: str
    recommended_hardware: str
    device_under_test: str
    classification_source: str  # "hardware-aware classification (predictor <version>)" or why not
    validation: dict[str, Any] | None = None


def _classification(model: str, benchmark_dir: Path | None) -> tuple[dict[str, Any], str]:
    """The hardware-aware classification, or the family classifier's alone (with the reason)."""
    from devicefit.predict.artifacts import PredictorUnavailable
    from devicefit.select.resources import HardwareAwareModelClassifier
    from devicefit.select.selector import SelectionError

    try:
        classifier = HardwareAwareModelClassifier(benchmark_dir=benchmark_dir)
        result = classifier.classify_model(model)
        version = classifier.selector.predictor.predictor.version()
        return result, f"hardware-aware classification (predictor {version})"
    except (PredictorUnavailable, SelectionError) as exc:
        from devicefit.resource_pool import resolve_device
        from models.classifier import classify_spec
        from models.resolve import resolve_model

        spec = resolve_model(model)
        verdict = classify_spec(spec)
        device = resolve_device(None)[0].split(":")[0]
        return ({"model_name": spec.name, "family": verdict.family, "subfamily": verdict.subfamily,
                 "recommended_hardware": "cuda" if device == "cuda" else device,
                 "resource_requirements": {"unavailable": f"no hardware-aware classification: {exc}"}},
                f"family classifier only (hardware-aware classification unavailable: {exc})")


def generate_test(model: str, output_dir: str | Path = "generated_tests", device: str | None = None,
                  clear_cache: bool = False, timeout: float = 60.0, debug: bool = False,
                  benchmark_dir: str | Path | None = None, validate: bool = True) -> GeneratedTest:
    """Render the family's template for `model` into `output_dir/test_hf_<model>.py`.

    With `validate`, the model is first built through the global ResourcePool on the device
    under test and run once, so a file is only written for a model that really runs there."""
    from devicefit.resource_pool import DeviceUnavailable, get_global_resource_pool, resolve_device
    from models.resolve import resolve_model

    if timeout <= 0:
        raise TestGenerationError(f"--timeout must be positive, got {timeout}")
    if debug:
        logging.getLogger("devicefit").setLevel(logging.DEBUG)
    spec = resolve_model(model)  # UnknownModelError names close catalog matches
    classification, source = _classification(model, Path(benchmark_dir) if benchmark_dir else None)
    family = classification["family"]
    if family not in FAMILIES:
        raise TestGenerationError(f"{spec.name} has no family a template covers ({family!r}; templates: {', '.join(FAMILIES)})")
    template = classification.get("recommended_template") or template_for_family(family)
    if not template_file(template).exists():
        raise TestGenerationError(f"template {template} for {family} is missing from {TEMPLATE_DIR}")
    recommended = classification["recommended_hardware"]
    under_test = device or recommended
    try:
        resolve_device(under_test)
    except DeviceUnavailable as exc:
        raise TestGenerationError(f"cannot generate a test on {under_test}: {exc}") from None
    pool = get_global_resource_pool()
    if clear_cache:
        pool.clear()
    validation = _validate(spec, family, under_test, pool) if validate else None
    from models.inputs import input_signature

    requirements = classification.get("resource_requirements") or {}
    modality = input_signature(spec, GENERATED_BATCH).modality
    docstring = _docstring(
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), model_name=spec.name, family=family,
        subfamily=classification.get("subfamily"), template=template, template_basis=source,
        recommended_hardware=recommended, forced_device=device,
        recommendation_basis=classification.get("selection_explanation") or source,
        resource_requirements={k: v for k, v in requirements.items() if k != "basis"},
        requirements_basis="; ".join(f"{k}: {v}" for k, v in (requirements.get("basis") or {}).items()) or source,
        model_source=f"{spec.source} model {spec.name}", modality=modality)
    model_ref = _model_ref(spec)
    content = _environment().get_template(template_file(template).name).render(
        docstring=docstring, model_ref=model_ref, family=family,
        recommended_hardware=recommended, forced_device=device,
        batch_size=GENERATED_BATCH, timeout=float(timeout), clear_cache=clear_cache, debug=debug)
    _check_source(content, docstring, template)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = _test_path(out, spec.name, model_ref)
    # O_NOFOLLOW: a link put there after the check is refused (ELOOP), not written through.
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666), "w", encoding="utf-8") as handle:
        handle.write(content)
    log.debug("wrote %s from %s", path, template)
    return GeneratedTest(path, spec.name, family, template, recommended, under_test, source, validation)


def _model_ref(spec) -> str:
    """What a generated test resolves: a local model's directory (or config file), else its name."""
    return str(spec.path) if spec.source == "local" else spec.name


def _generated_for(path: Path) -> str | None:
    """The MODEL a generated test file at `path` builds; None for a file that is not one."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["MODEL"]
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def _test_path(out: Path, name: str, model_ref: str) -> Path:
    """`out/test_hf_<stem>.py`, unless that file holds something else: file names keep
    [A-Za-z0-9_] only, so `my.model` and `my-model` (or two directories of one name) shared a
    file and the second test silently replaced the first, as it did a user's own file of that
    name or the target of a symbolic link of that name. Then the stem gets 8 hex digits of the model's reference; a file there that is not
    this model's test either is refused."""
    def free(path: Path) -> bool:  # a symbolic link is never written through (a dangling one created its target)
        return not path.is_symlink() and (not path.exists() or _generated_for(path) == model_ref)

    stem = safe_file_stem(name)
    plain = out / f"test_hf_{stem}.py"
    if free(plain):
        return plain
    digest = hashlib.sha256(model_ref.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    suffixed = out / f"test_hf_{stem}_{digest}.py"
    if free(suffixed):
        log.info("%s holds another test; writing %s", plain, suffixed.name)
        return suffixed
    raise TestGenerationError(f"{plain} and {suffixed} already hold other files (not the generated test of {model_ref}); "
                              "nothing written: give another --output-dir")


def _environment():
    """Templates see values only through the escaping filters (StrictUndefined: a missing value
    is an error, not an empty string)."""
    import jinja2

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True, autoescape=False)
    environment.filters.update(python_literal=python_literal, python_docstring=python_docstring)
    return environment


def _check_source(content: str, docstring: str, template: str) -> None:
    """The rendered file must parse, and its docstring must be exactly the text we meant: a
    value that escaped its literal would show up here before anything is written."""
    try:
        tree = ast.parse(content)
    except SyntaxError as exc:
        raise TestGenerationError(f"{template} rendered invalid Python ({exc.msg}, line {exc.lineno}); nothing written") from None
    if ast.get_docstring(tree, clean=False) != docstring:
        raise TestGenerationError(f"{template} rendered a docstring other than the one generated; nothing written")


def _docstring(*, generated_at: str, model_name: str, family: str, subfamily: str | None, template: str,
               template_basis: str, recommended_hardware: str, forced_device: str | None, recommendation_basis: str,
               resource_requirements: dict[str, Any], requirements_basis: str, model_source: str, modality: str) -> str:
    """The generated module's docstring as plain text; the template writes it as escaped literals."""
    lines = [f"Generated by `devicefit generate-tests` on {generated_at}: {model_name} ({family}"
             + (f", {subfamily}" if subfamily else "") + ").",
             "",
             f"Template: {template} (chosen by {template_basis}).",
             f"Recommended hardware: {recommended_hardware} ({recommendation_basis}).",
             f"Device under test: {forced_device or 'recommended'}; every other kind is tested too and skips, with "
             "detection's", "reason, where it is absent.",
             f"Resource requirements ({requirements_basis}):",
             *(f"    {key}: {value}" for key, value in resource_requirements.items()),
             "",
             f"Each test builds the model ({model_source}) through devicefit's ResourcePool on the device, feeds a valid",
             f"batch of {GENERATED_BATCH} for its modality ({modality}) and checks the output's shape and dtype against the",
             "model's config."]
    return "\n".join(lines) + "\n"


def _validate(spec, family: str, device: str, pool) -> dict[str, Any]:
    """Build and run the model once through the pool: the generated test's own path."""
    import torch

    from devicefit.resource_pool import resolve_device
    from models.inputs import input_signature
    from models.loading import build_model
    from models.tensors import make_inputs

    torch_device = resolve_device(device)[0]
    # Keyed by the model's reference, not its name: two directories of one name (runs/v1/checkpoint-500,
    # runs/v2/checkpoint-500) are two models, and the second was "validated" with the first's pooled build.
    model = pool.get_model(family, _model_ref(spec), constructor=lambda: build_model(spec), hardware_preferences={"device": device})
    inputs = make_inputs(input_signature(spec, 1), torch_device)
    try:
        with torch.inference_mode():
            outputs = model(**inputs)
    except Exception as exc:  # noqa: BLE001 - reported as the reason no test was written
        raise TestGenerationError(f"{spec.name} does not run on {device}: {type(exc).__name__}: {exc}") from None
    first = outputs[0]
    return {"device": torch_device, "first_output_shape": list(first.shape), "dtype": str(first.dtype),
            "pool": {k: v for k, v in pool.stats().items() if k in ("hits", "misses", "memory_mb")}}
