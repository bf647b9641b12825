"""The generation scenario on OpenVINO: openvino-genai's LLMPipeline over a stateful IR, beside
torch's generate() (the OpenVINO backend hands `mode == "generation"` here).

Export. LLMPipeline reads the stateful IR (the KV cache kept as the model's state, a `beam_idx`
input) that optimum-intel's exporter writes. optimum-intel 2.2.0 pins transformers<5.6, and this
project runs transformers 5.x, so the exporter lives in a venv of its own (`make genai-export`:
`.venv-ovexport`, or the python named by DEVICEFIT_OV_EXPORT_PYTHON) and runs as a subprocess:
this process builds the catalog model with the same seeded weights the torch backend measures
(models.loading.build) and saves it; the exporter reads that directory and writes the IR (fp32
weights: no weight compression, whatever the size). The IR is cached under
<data>/cache/openvino-genai by everything that shapes it. Beside it, torch's fp32 logits over a
fixed 16-token prompt: the IR's logits over the same prompt must agree (max |difference| over
max |torch|, OpenVINO's fp32 tolerance) or the row fails, and they are the row's output check.

Timing. One sample is one `generate()` of the fixed length (min_new_tokens == max_new_tokens,
greedy) on a seeded prompt, timed by the harness. LLMPipeline runs with ATTENTION_BACKEND=SDPA
(the stateful pipeline: a batch is one tensor; the paged-attention default takes batch 1 only
as a tensor), and INFERENCE_PRECISION_HINT and KV_CACHE_PRECISION set explicitly to the row's
precision (the CPU plugin's KV cache default is u8, which the row's KV-cache figure would not
describe). Per-token times at batch 1 come from a
streamer on the harness's clock; openvino-genai streams batch 1 only, so at larger batches they
are its own (raw_metrics: the time to the first token, then when each later token came). Its own TTFT and TPOT (TPOT per generated token of
the whole batch, i.e. a step over the batch size) are recorded beside the harness's figures.

Decoder-only models only: LLMPipeline has no encoder (T5, Whisper are skipped, saying so).
"""
from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmark_runners.backends.base import OutputMismatch, PreparedModel, TimedStep
from benchmark_runners.cache_files import mark_used, read_json_object, require_free_space, staging, weight_bytes
from benchmark_runners.generation import RequestTiming, request_shape
from benchmark_runners.hardware.cpu_budget import restricted_threads
from benchmark_runners.records import BenchmarkConfig
from benchmark_runners.timers import IterationClock
from benchmark_runners.vendor_telemetry import BLOCK_LINE
from models.catalog import ModelSpec

EXPORT_PYTHON_ENV = "DEVICEFIT_OV_EXPORT_PYTHON"
EXPORT_VENV = Path(__file__).resolve().parents[2] / ".venv-ovexport"
EXPORT_TIMEOUT_S = 900
CHECK_PROMPT_TOKENS = 16
TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2}
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}
ATTENTION_BACKEND = "SDPA"
# Run by the export venv's python: argv = the saved model directory, the IR directory; what it
# did goes to exporter.json in the IR directory (stdout is the exporter's own chatter).
EXPORT_SCRIPT = r"""
import json, sys
from pathlib import Path
src, out = Path(sys.argv[1]), Path(sys.argv[2])
config = json.loads((src / "config.json").read_text())
# transformers 5 writes rope settings as rope_parameters; 4.x reads rope_theta / rope_scaling
rope = config.get("rope_parameters") or {}
adaptations = []
if rope and "rope_theta" not in config:
    config["rope_theta"] = rope.get("rope_theta", 10000.0)
    if rope.get("rope_type", "default") != "default":
        config["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    adaptations.append("rope_parameters written as rope_theta/rope_scaling for transformers 4")
    (src / "config.json").write_text(json.dumps(config))
from importlib.metadata import version
from optimum.intel import OVModelForCausalLM
model = OVModelForCausalLM.from_pretrained(src, export=True, stateful=True, compile=False, load_in_8bit=False)
model.save_pretrained(out)
(out / "exporter.json").write_text(json.dumps({"optimum_intel": version("optimum-intel"), "transformers": version("transformers"),
                                               "adaptations": adaptations}))
"""


def export_python() -> Path:
    named = os.environ.get(EXPORT_PYTHON_ENV)
    return Path(named) if named else EXPORT_VENV / "bin" / "python"


# What the export python has: {"optimum-intel": version, "transformers": version}, or why not.
_PROBE = ("import json\nfrom importlib.metadata import version\n"
          "print(json.dumps({p: version(p) for p in ('optimum-intel', 'transformers', 'torch')}))")


@functools.lru_cache(maxsize=4)
def exporter_versions(python: Path) -> dict[str, str] | str:
    """The export venv's package versions (part of the IR cache key), or the reason it cannot
    export: a venv whose install stopped half-way has a python but no optimum-intel."""
    if not python.exists():
        return f"{python} does not exist"
    try:
        proc = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=60, env=_clean_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} did not run ({type(exc).__name__}: {exc})"
    if proc.returncode != 0:
        return f"{python} lacks the exporter ({(proc.stderr.strip().splitlines() or ['no output'])[-1]})"
    return json.loads(proc.stdout)


def _clean_env() -> dict[str, str]:
    """The environment for the export venv's python, without this process's import path (its
    transformers 5 must not shadow the venv's 4.x)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def precision_reason(precision: str) -> str:
    return (f"{precision} generation on OpenVINO is not measured: the IR keeps fp32 weights, compiled with "
            f"INFERENCE_PRECISION_HINT {' or '.join(PRECISION_HINTS.values())} (fp32, bf16)")


def unavailable_reason(spec: ModelSpec, config: BenchmarkConfig) -> str | None:
    """Why this generation config cannot run on OpenVINO here (None: it can)."""
    try:
        import openvino_genai  # noqa: F401
    except ImportError as exc:
        return f"the generation scenario on OpenVINO needs openvino-genai, which is not installed ({exc}; make install)"
    if spec.config.get("is_encoder_decoder"):
        other = ("openvino-genai's WhisperPipeline (audio in, text out), which devicefit does not drive yet; it also reads the "
                 "checkpoint's tokenizer as OpenVINO IRs, which a Whisper built from its config has none of"
                 if "whisper" in (spec.architecture or "").lower() else "a pipeline openvino-genai does not have")
        return (f"devicefit generates on OpenVINO through openvino-genai's LLMPipeline, which runs decoder-only models; "
                f"{spec.name} ({spec.architecture}) is an encoder-decoder, which needs {other}")
    if config.precision not in PRECISION_HINTS:
        return precision_reason(config.precision)
    versions = exporter_versions(export_python())
    if isinstance(versions, str):
        return (f"the stateful IR openvino-genai reads is exported by optimum-intel 2.2.0, which pins transformers<5.6 and "
                f"so lives in its own venv, and {versions} (make genai-export, or set {EXPORT_PYTHON_ENV})")
    return None


def cache_dir() -> Path:
    from benchmark_runners.paths import data_dir

    return data_dir() / "cache" / "openvino-genai"


def installation_identity() -> dict[str, Any]:
    """The part of every export's key that is this installation's, not the model's: the tool
    versions here and in the export venv, and the export script's digest. An entry recording
    other values is never read again here (`devicefit cache` calls it stale)."""
    import openvino as ov
    import torch
    import transformers

    from models.loading import WEIGHT_SEED

    return {"weight_seed": WEIGHT_SEED, "openvino": ov.get_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "script": hashlib.sha256(EXPORT_SCRIPT.encode()).hexdigest()[:12],
            "exporter": exporter_versions(export_python())}


def _check_prompt(spec: ModelSpec):
    import numpy as np

    vocab = int(spec.config.get("vocab_size") or 1000)
    return np.random.default_rng(0).integers(0, vocab, size=(1, CHECK_PROMPT_TOKENS), dtype=np.int64)


def export(spec: ModelSpec) -> tuple[Path, dict[str, Any]]:
    """The IR directory for this model (exported once, then cached) and what made it."""
    import numpy as np
    import torch

    from models.loading import build, weights_kind

    identity = {"model": spec.name, "config": spec.config, "path": str(spec.path) if spec.path else None, "weights": weights_kind(spec),
                **installation_identity()}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    out = cache_dir() / f"{spec.name.replace('/', '_')}-{key}"
    meta = out / "devicefit-export.json"
    if (cached := read_json_object(meta)) is not None:
        mark_used(meta)
        return out, {**cached, "source": "disk cache", "export_seconds": None}
    started = time.perf_counter()
    built = build(spec, torch.float32)
    prompt = _check_prompt(spec)
    with torch.no_grad():
        reference = built.model(input_ids=torch.from_numpy(prompt)).logits.float().numpy()
    what = f"{spec.name}'s stateful IR for openvino-genai"
    scratch = Path(tempfile.gettempdir())
    need = weight_bytes(built.model)  # the IR's fp32 weights, and as much again for the Hugging Face copy it is made from
    out.parent.mkdir(parents=True, exist_ok=True)
    if scratch.stat().st_dev == out.parent.stat().st_dev:
        require_free_space(out.parent, 2 * need, what)
    else:
        require_free_space(scratch, need, f"the Hugging Face copy {what} is made from")
        require_free_space(out.parent, need, what)
    with staging(out.parent, what) as stage:  # never a half-written `out`
        ir = stage / "ir"
        ir.mkdir()
        with tempfile.TemporaryDirectory(prefix="devicefit-genai-") as tmp:
            src = Path(tmp) / "hf"
            built.model.save_pretrained(src)
            del built.model
            proc = subprocess.run([str(export_python()), "-c", BLOCK_LINE + EXPORT_SCRIPT, str(src), str(ir)], capture_output=True,
                                  text=True, timeout=EXPORT_TIMEOUT_S, env=_clean_env())
        if proc.returncode != 0 or not (ir / "exporter.json").exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"optimum-intel's export of {spec.name} failed ({export_python()}, exit {proc.returncode}): "
                               f"{' | '.join(tail) or 'no output'}")
        exporter = json.loads((ir / "exporter.json").read_text())
        np.save(ir / "devicefit-reference.npy", reference)
        info = {"identity": identity, "exporter": exporter, "weights_recipe": built.weights_recipe,
                "export_seconds": round(time.perf_counter() - started, 2),
                "recipe": (f"stateful IR by optimum-intel {exporter['optimum_intel']} (transformers {exporter['transformers']}, "
                           "in its own venv) from the seeded torch model; fp32 weights, no weight compression")}
        (ir / "devicefit-export.json").write_text(json.dumps(info, default=str))
        if read_json_object(meta) is None:  # another worker may have finished the same export meanwhile: keep its
            if out.exists():  # an earlier export that stopped before its metadata, or with it unreadable: not an IR to trust
                shutil.rmtree(out)
            try:
                ir.replace(out)
            except OSError as exc:  # another worker's whole export took the place in between: keep its
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or read_json_object(meta) is None:
                    raise
    return out, {**json.loads(meta.read_text()), "source": "exported"}


_logits: dict[tuple[str, str], Any] = {}  # (IR directory, precision) -> the IR's logits over the check prompt


def ir_logits(ir: Path, prompt, precision: str):
    """The stateful IR's logits over `prompt` (batch 1), compiled as the pipeline compiles it."""
    import numpy as np
    import openvino as ov

    hint = PRECISION_HINTS[precision]
    compiled = ov.Core().compile_model(ir / "openvino_model.xml", "CPU", {"INFERENCE_PRECISION_HINT": hint, "KV_CACHE_PRECISION": hint})
    request = compiled.create_infer_request()
    names = {n for port in compiled.inputs for n in port.get_names()}
    feed = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    if "position_ids" in names:
        feed["position_ids"] = np.arange(prompt.shape[1], dtype=np.int64)[None, :]
    if "beam_idx" in names:
        feed["beam_idx"] = np.zeros(prompt.shape[0], dtype=np.int32)
    request.reset_state()
    return np.asarray(request.infer(feed)[compiled.output(0)]).astype(np.float32)


def prepare(spec: ModelSpec, config: BenchmarkConfig) -> PreparedModel:
    import numpy as np
    import openvino as ov
    import openvino_genai
    import torch

    started = time.perf_counter()
    ir, info = export(spec)
    reference = np.load(ir / "devicefit-reference.npy")
    key = (str(ir), config.precision)
    if key not in _logits:  # one check per IR and precision in this worker, whatever the batch
        _logits[key] = ir_logits(ir, _check_prompt(spec), config.precision)
    logits = _logits[key]
    diff = float(np.max(np.abs(logits - reference)) / max(float(np.max(np.abs(reference))), 1e-30))
    agreement = {"reference": f"torch fp32 logits over a seeded {CHECK_PROMPT_TOKENS}-token prompt", "relative_max_abs_diff": diff,
                 "tolerance": TOLERANCE[config.precision], "within_tolerance": diff <= TOLERANCE[config.precision]}
    if not agreement["within_tolerance"]:
        raise OutputMismatch(f"the exported IR's logits differ from torch's by {diff:.3g} of their scale "
                             f"(tolerance {TOLERANCE[config.precision]})")
    hint = PRECISION_HINTS[config.precision]
    # The KV cache in the row's precision: the CPU plugin's default is u8 (quantized), which the
    # row's KV-cache figure would not describe. Denormals kept, as on OpenVINO's inference rows.
    hints = {"INFERENCE_PRECISION_HINT": hint, "KV_CACHE_PRECISION": hint, "CPU_DENORMALS_OPTIMIZATION": False,
             "ATTENTION_BACKEND": ATTENTION_BACKEND}
    threads = config.threads or restricted_threads()  # a CFS quota is not OpenVINO's to see (hardware/cpu_budget.py)
    if threads:
        hints["INFERENCE_NUM_THREADS"] = threads
    load_started = time.perf_counter()
    pipe = openvino_genai.LLMPipeline(str(ir), "CPU", **hints)
    load_s = time.perf_counter() - load_started
    shape = request_shape(spec, config.seq_length, config.new_tokens)
    generation = openvino_genai.GenerationConfig()
    generation.max_new_tokens = generation.min_new_tokens = shape.new_tokens
    generation.do_sample = False
    generation.num_beams = 1
    backend_config = {
        "pipeline": "openvino_genai.LLMPipeline", "openvino_genai_version": openvino_genai.__version__, "openvino_version": ov.get_version(),
        "device": "CPU", "requested_hints": {k: str(v) for k, v in hints.items()}, "export": info["recipe"],
        "export_source": info["source"], "export_seconds": info.get("export_seconds"), "exporter": info["exporter"],
        "adaptations": info["exporter"]["adaptations"], "output_agreement": agreement,
        "generation": {"max_new_tokens": shape.new_tokens, "min_new_tokens": shape.new_tokens, "do_sample": False, "num_beams": 1},
        "token_times": ("a streamer on the harness's clock" if config.batch_size == 1
                        else "openvino-genai's own token times (raw_metrics): it streams batch 1 only"),
        "pipeline_load_seconds": round(load_s, 3),
    }
    # the export (or reading its cache), the agreement check and the pipeline's load, as OpenVINO's inference rows count them
    return PreparedModel(handle=pipe, device=config.device, precision=config.precision, mode="generation",
                         recipe=f"{info['recipe']}; compute and KV cache {hint} (INFERENCE_PRECISION_HINT, KV_CACHE_PRECISION)",
                         load_time_s=time.perf_counter() - started, backend_config=backend_config,
                         input_float_dtype=torch.bfloat16 if config.precision == "bf16" else None,  # the KV cache's element size
                         state={"generation": generation, "new_tokens": shape.new_tokens, "logits": logits},
                         weights_recipe=info["weights_recipe"], denormal_policy="denormals kept (CPU_DENORMALS_OPTIMIZATION=False)")


def make_step(prepared: PreparedModel, inputs: dict[str, Any]) -> TimedStep:
    """One request: generate() over the prompt to the fixed length. At batch 1 a streamer takes
    each token's time as it comes; above, openvino-genai's own token times, read after timing
    (as are its own figures and the token count check: nothing but generate() is timed)."""
    import numpy as np
    import openvino as ov
    import openvino_genai

    pipe, state = prepared.handle, prepared.state
    ids = inputs["input_ids"]
    ids = ov.Tensor(np.ascontiguousarray(ids.numpy() if hasattr(ids, "numpy") else ids).astype(np.int64))
    batch, new = ids.shape[0], state["new_tokens"]
    requests: list[RequestTiming] = []
    results: list[Any] = []  # each request's EncodedResults (tokens and perf_metrics)
    start = [0]

    class Streamer(openvino_genai.StreamerBase):
        def write(self, token):
            requests[-1].token_ns.append(time.perf_counter_ns() - start[0])
            return openvino_genai.StreamingStatus.RUNNING

        def end(self):
            pass

    def generation_step(clock: IterationClock) -> None:
        requests.append(RequestTiming())
        streamer = Streamer() if batch == 1 else None
        start[0] = time.perf_counter_ns()
        results.append(pipe.generate(ids, state["generation"], streamer))
        requests[-1].total_ns = time.perf_counter_ns() - start[0]

    def token_timings() -> list[RequestTiming]:
        for request, result in zip(requests, results):
            produced = [len(t) for t in result.tokens]
            if produced != [new] * batch:
                raise RuntimeError(f"openvino-genai generated {produced} tokens instead of {new} per sequence")
            if batch > 1 and not request.token_ns:  # the first token's time (us), then when each later one came (ms)
                raw = result.perf_metrics.raw_metrics
                first, came = raw.m_times_to_first_token[0] * 1e3, list(raw.m_new_token_times)
                request.token_ns = [int(first + (t - came[0]) * 1e6) for t in came]
            if not 0 < request.token_ns[-1] <= request.total_ns:
                raise RuntimeError(f"openvino-genai's token times ({request.token_ns[-1] / 1e6:.1f} ms to the last) do not fit in "
                                   f"the request's {request.total_ns / 1e6:.1f} ms: a unit change in its raw_metrics?")
        return requests

    def own_figures(timed: int) -> dict[str, Any]:
        """openvino-genai's own figures over the last `timed` requests (medians)."""
        import statistics

        runs = [r.perf_metrics for r in results[-timed:]] if timed else []
        figures = {"ttft_ms": lambda m: m.get_ttft().mean, "tpot_ms": lambda m: m.get_tpot().mean,
                   "throughput_tokens_per_s": lambda m: m.get_throughput().mean, "generate_ms": lambda m: m.get_generate_duration().mean}
        return {"source": "openvino-genai perf_metrics (TPOT: per generated token of the batch)",
                **{k: statistics.median(f(m) for m in runs) for k, f in figures.items()}} if runs else {}

    return TimedStep(generation_step, token_timings=token_timings, runtime_figures=own_figures)
