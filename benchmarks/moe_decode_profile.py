"""Why does a mixture of experts decode slower at batch 4 than at batch 1 on a GPU, when dense
models of similar kernel counts do not?

Builds the model as devicefit does (`models.resolve.resolve_model`, `models.loading.build`:
seeded random weights, built in fp32 on the host and cast), moves it to the device, prefills a
seeded random prompt into a `transformers.DynamicCache`, then for each batch size measures the
decode forward `model(input_ids=next_token, past_key_values=cache, use_cache=True)` (greedy
next token by argmax on the device, nothing read back to the host by this loop):

- wall time per step: `perf_counter` around N steps with one synchronize at the end
  (pipelined), and per step with a synchronize after each (as devicefit's TokenTimer does);
  the host's own time per step (the call returning, before any synchronize) beside it;
- one profile of P steps (torch.profiler, CPU + CUDA activities), each step in a
  `record_function` range: kernels launched and their GPU time per step, GPU time by the aten op
  that launched it, host-device synchronisations (cuda*Synchronize, blocking cudaMemcpy, DtoH
  copies) with the op chain they came from, the data-dependent aten ops (item, nonzero,
  _local_scalar_dense, ...), and the top ops by CPU self time;
- where the first profile found synchronisations, one more step profiled with Python stacks to
  name the source lines;
- for a mixture of experts, the distinct experts each layer's router picked per step (router
  outputs recorded by forward hooks in a separate run of steps).

Optional contrasts (each only where the time budget allows, written as it goes):
`--impls eager,batched_mm` runs the same decode with transformers' other experts
implementations; `--micro` times the experts' grouped_mm alone against a per-expert F.linear
loop on one layer's weights for 1..8 experts hit; `--generate` times generate() per token as
devicefit's generation scenario does; `--dense gpt2,...` profiles dense models beside.

    PYTHONPATH=$PWD python3 benchmarks/moe_decode_profile.py --out $OUT --device cuda \
        --batches 1,4 --more-batches 2,8,16 --generate --dense gpt2 --impls eager,batched_mm \
        --micro --budget-s 190      # the run in benchmarks/datasets/h200-cuda/provenance/

Writes <out>/moe_decode_profile.json (rewritten after every section) and a text summary
<out>/moe_decode_profile.txt.

Two things the first H200 runs taught (benchmarks/datasets/h200-cuda/README.md, "Why the
mixture of experts decodes twice as slowly at batch 4"):
- generate() does not decode with grouped_mm on a GPU: transformers (5.17 on the H200, 5.24 here:
  `GenerationMixin._optimize_model_for_decode`) switches every `grouped_mm` experts implementation
  to `batched_mm` for the decode stage on a non-CPU device. The `--generate` profile therefore shows
  batched_mm's kernels (aten::index gathering each token's experts' weights, aten::bmm), while the
  plain loop above runs the model's configured implementation.
- SDPA picks cuDNN attention there, which builds a graph for each new key length: a decode over
  lengths not seen before costs about 45-70 ms a step on the host (`first_pass_ms_per_step_cold`),
  hence the warm-up pass and `Decoder.reset()`.
"""
from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SYNC_RUNTIME = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
                "cuCtxSynchronize", "cuEventSynchronize")
DATA_DEPENDENT_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::unique",
                      "aten::_unique2", "aten::unique_consecutive", "aten::masked_select", "aten::tolist",
                      "aten::equal", "aten::allclose", "aten::nonzero_static")
LAUNCH_RUNTIME = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                  "cudaLaunchCooperativeKernel", "cudaGraphLaunch")
HOST_CATS = ("cpu_op", "user_annotation", "python_function")


# ---------------------------------------------------------------------------------------------
# small helpers


class Budget:
    def __init__(self, seconds: float):
        self.start = time.perf_counter()
        self.seconds = seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def environment(device: str) -> dict:
    import transformers

    env = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__, "platform": platform.platform(), "host_cpus": os.cpu_count(),
           "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=torch.cuda.get_device_name(0), gpu_memory_gib=round(p.total_memory / 2**30, 1),
                   sm_count=p.multi_processor_count, capability=f"{p.major}.{p.minor}")
    try:
        from transformers.integrations import moe

        env["grouped_mm_experts_forward_source"] = inspect.getsource(moe.grouped_mm_experts_forward)
    except Exception as exc:  # noqa: BLE001 - only a record
        env["grouped_mm_experts_forward_source"] = f"unavailable: {exc!r}"
    return env


def cache_kwarg(model) -> str:
    """transformers 5.17 names the cache `past_key_values`; later releases name it `cache`."""
    params = inspect.signature(type(model).forward).parameters
    return "past_key_values" if "past_key_values" in params else "cache"


def new_cache(model):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:
        return DynamicCache()


def experts_modules(model) -> list:
    return [m for m in model.modules() if type(m).__name__.endswith("Experts") and hasattr(m, "num_experts")]


def router_modules(model) -> list:
    return [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]


def experts_impl(model) -> str | None:
    mods = experts_modules(model)
    if not mods:
        return None
    cfg = getattr(mods[0], "config", model.config)
    return getattr(cfg, "_experts_implementation", None)


def set_experts_impl(model, impl: str) -> str | None:
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation(impl)
        except Exception as exc:  # noqa: BLE001 - fall back to the attribute the experts read
            print(f"set_experts_implementation({impl!r}) failed: {exc!r}; setting the config attribute", flush=True)
    if experts_impl(model) != impl:
        for m in experts_modules(model):
            cfg = getattr(m, "config", None)
            if cfg is not None:
                try:
                    cfg._experts_implementation = impl
                except Exception:  # noqa: BLE001
                    object.__setattr__(cfg, "_experts_implementation_internal", impl)
    return experts_impl(model)


# ---------------------------------------------------------------------------------------------
# the decode loop


class Decoder:
    """A prompt prefilled into a fresh DynamicCache; `step()` decodes one token. `reset()` starts
    the same request again, so every phase decodes over the same cache lengths (256, 257, ...)
    that a warm-up pass has already run: a kernel library that plans per shape (cuDNN attention
    builds a graph for each new key length) is then measured warm, as devicefit's repeated
    requests of one length are. `prefill_impl` runs the prefill with another experts
    implementation than the decode (batched_mm cannot hold a 256-token prefill's weight gather)."""

    def __init__(self, model, device: str, batch: int, prompt: int, seed: int, prefill_impl: str | None = None):
        self.model, self.device, self.batch = model, device, batch
        self.key = cache_kwarg(model)
        self.prefill_impl = prefill_impl
        vocab = model.config.get_text_config().vocab_size if hasattr(model.config, "get_text_config") else model.config.vocab_size
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (batch, prompt), generator=gen).to(device)
        self.reset()

    def reset(self):
        decode_impl = experts_impl(self.model) if self.prefill_impl else None
        if self.prefill_impl and decode_impl != self.prefill_impl:
            set_experts_impl(self.model, self.prefill_impl)
        self.cache = None
        self.cache = new_cache(self.model)
        try:
            with torch.inference_mode():
                out = self._forward(self.ids, prefill=True)
                self.next = out.logits[:, -1:].argmax(-1)
        finally:
            if self.prefill_impl and decode_impl != self.prefill_impl:
                set_experts_impl(self.model, decode_impl)
        self.steps = 0
        sync(self.device)

    def _forward(self, ids, prefill=False):
        kwargs = {"input_ids": ids, self.key: self.cache, "use_cache": True}
        if prefill:
            kwargs["logits_to_keep"] = 1
        try:
            return self.model(**kwargs)
        except TypeError:
            kwargs.pop("logits_to_keep", None)
            return self.model(**kwargs)

    def step(self):
        out = self.model(input_ids=self.next, **{self.key: self.cache}, use_cache=True)
        self.next = out.logits[:, -1:].argmax(-1)
        self.steps += 1


def warm(dec: Decoder, steps: int, passes: int = 2) -> None:
    with torch.inference_mode():
        for _ in range(passes):
            dec.reset()
            for _ in range(steps):
                dec.step()
    sync(dec.device)


def time_steps(dec: Decoder, steps: int) -> dict:
    dev = dec.device
    with torch.inference_mode():
        dec.reset()
        for _ in range(3):
            dec.step()
        sync(dev)
        host = []
        t0 = time.perf_counter()
        for _ in range(steps):
            a = time.perf_counter()
            dec.step()
            host.append(time.perf_counter() - a)
        sync(dev)
        pipelined = (time.perf_counter() - t0) / steps
        dec.reset()
        for _ in range(3):
            dec.step()
        sync(dev)
        synced = []
        for _ in range(steps):
            a = time.perf_counter()
            dec.step()
            sync(dev)
            synced.append(time.perf_counter() - a)
    return {"steps": steps, "wall_ms_per_step_pipelined": pipelined * 1e3,
            "wall_ms_per_step_synced_median": statistics.median(synced) * 1e3,
            "wall_ms_per_step_synced_min": min(synced) * 1e3,
            "wall_ms_per_step_synced_p90": sorted(synced)[int(0.9 * (len(synced) - 1))] * 1e3,
            "wall_ms_per_step_synced_max": max(synced) * 1e3,
            "host_call_ms_per_step_median_pipelined": statistics.median(host) * 1e3,
            "cache_length_after": dec.cache.get_seq_length() if hasattr(dec.cache, "get_seq_length") else None}


# ---------------------------------------------------------------------------------------------
# profiling and trace parsing


def profile_steps(dec: Decoder, steps: int, with_stack: bool = False) -> dict:
    from torch.profiler import ProfilerActivity, profile, record_function

    acts = [ProfilerActivity.CPU]
    if dec.device.startswith("cuda"):
        acts.append(ProfilerActivity.CUDA)
    with torch.inference_mode():
        dec.reset()
        for _ in range(4):
            dec.step()
        sync(dec.device)
        with profile(activities=acts, record_shapes=False, with_stack=with_stack) as prof:
            for i in range(steps):
                with record_function(f"decode_step_{i}"):
                    dec.step()
            sync(dec.device)
    result = parse_trace(chrome_trace(prof), steps)
    if not with_stack:
        result["top_cpu_self"] = top_cpu_self(prof, steps)
        result["attention_ops"] = attention_ops(prof, steps)
    return result


def attention_ops(prof, steps: int) -> list[dict]:
    """Which SDPA backend ran (flash, efficient, cuDNN, math) and its host cost."""
    rows = []
    for e in prof.key_averages():
        k = e.key.lower()
        if "attention" in k or "sdpa" in k or "flash" in k or "cudnn" in k:
            rows.append({"name": e.key, "calls_per_step": e.count / steps,
                         "cpu_total_us_per_step": round(e.cpu_time_total / steps, 1),
                         "self_cpu_us_per_step": round(e.self_cpu_time_total / steps, 1)})
    return sorted(rows, key=lambda r: -r["cpu_total_us_per_step"])[:8]


def top_cpu_self(prof, steps: int, n: int = 25) -> list[dict]:
    rows = []
    for e in prof.key_averages():
        rows.append({"name": e.key, "self_cpu_us_per_step": e.self_cpu_time_total / steps,
                     "calls_per_step": e.count / steps})
    rows = [r for r in rows if not r["name"].startswith("decode_step_")]
    rows.sort(key=lambda r: -r["self_cpu_us_per_step"])
    return [dict(r, self_cpu_us_per_step=round(r["self_cpu_us_per_step"], 1)) for r in rows[:n]]


def _short_frame(name: str) -> str:
    # "…/site-packages/transformers/integrations/moe.py(448): grouped_mm_experts_forward"
    for marker in ("site-packages/", "dist-packages/"):
        if marker in name:
            return name.split(marker, 1)[1]
    return name


def chrome_trace(prof) -> dict:
    """The profile's events, through the Chrome trace file torch.profiler writes (removed after)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def parse_trace(trace: dict, steps: int) -> dict:
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    host = defaultdict(list)  # (pid, tid) -> events
    runtime, device_events = [], []
    for e in events:
        cat = e.get("cat", "")
        if cat in HOST_CATS or cat in ("cuda_runtime", "cuda_driver"):
            host[(e.get("pid"), e.get("tid"))].append(e)
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            device_events.append(e)
    # sweep each host thread: every event gets the chain of enclosing intervals
    for evs in host.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack: list[dict] = []
        for e in evs:
            ts, end = e["ts"], e["ts"] + e.get("dur", 0)
            # sorted by start (longest first): pop what ended before this event or cannot hold it
            while stack and (stack[-1]["ts"] + stack[-1].get("dur", 0) <= ts
                             or stack[-1]["ts"] + stack[-1].get("dur", 0) < end - 0.01):
                stack.pop()
            e["_parents"] = list(stack)
            if e.get("cat") in HOST_CATS:
                stack.append(e)
            if e.get("cat") in ("cuda_runtime", "cuda_driver"):
                runtime.append(e)

    def step_of(e) -> int | None:
        for p in e.get("_parents", []):
            if p.get("cat") == "user_annotation" and p["name"].startswith("decode_step_"):
                return int(p["name"].rsplit("_", 1)[1])
        if e.get("cat") == "user_annotation" and e["name"].startswith("decode_step_"):
            return int(e["name"].rsplit("_", 1)[1])
        return None

    def op_chain(e) -> list[str]:
        return [p["name"] for p in e.get("_parents", []) if p.get("cat") == "cpu_op"]

    def py_chain(e) -> list[str]:
        return [_short_frame(p["name"]) for p in e.get("_parents", []) if p.get("cat") == "python_function"]

    by_corr = {}
    for r in runtime:
        corr = (r.get("args") or {}).get("correlation")
        if corr is not None:
            by_corr[corr] = r
    step_wall = {}
    for evs in host.values():
        for e in evs:
            s = step_of(e) if e.get("cat") == "user_annotation" else None
            if s is not None and e["name"].startswith("decode_step_"):
                step_wall[s] = e.get("dur", 0)

    per_step = {s: {"kernels": 0, "kernel_us": 0.0, "memcpy": 0, "memcpy_us": 0.0, "memset": 0, "dtoh": 0,
                    "first_ts": None, "last_end": None} for s in range(steps)}
    kernel_by_op: dict[str, list] = defaultdict(lambda: [0, 0.0])
    kernel_by_name: dict[str, list] = defaultdict(lambda: [0, 0.0])
    dtoh_sources: Counter = Counter()
    memcpy_sources: Counter = Counter()
    unattributed = 0
    for d in device_events:
        corr = (d.get("args") or {}).get("correlation")
        r = by_corr.get(corr)
        s = step_of(r) if r is not None else None
        if s is None or s not in per_step:
            unattributed += 1
            continue
        ps = per_step[s]
        dur = float(d.get("dur", 0))
        ps["first_ts"] = d["ts"] if ps["first_ts"] is None else min(ps["first_ts"], d["ts"])
        ps["last_end"] = d["ts"] + dur if ps["last_end"] is None else max(ps["last_end"], d["ts"] + dur)
        cat = d.get("cat")
        chain = op_chain(r)
        if cat == "kernel":
            ps["kernels"] += 1
            ps["kernel_us"] += dur
            op = chain[-1] if chain else "(no aten op)"
            kernel_by_op[op][0] += 1
            kernel_by_op[op][1] += dur
            kname = d["name"]
            kernel_by_name[kname[:160]][0] += 1
            kernel_by_name[kname[:160]][1] += dur
        elif cat == "gpu_memcpy":
            ps["memcpy"] += 1
            ps["memcpy_us"] += dur
            memcpy_sources[f"{d['name']} <- " + (" > ".join(chain[-3:]) or "(no aten op)")] += 1
            if "DtoH" in d["name"]:
                ps["dtoh"] += 1
                dtoh_sources[" > ".join(chain[-3:]) or "(no aten op)"] += 1
        elif cat == "gpu_memset":
            ps["memset"] += 1

    syncs = Counter()
    sync_sources: Counter = Counter()
    sync_py: Counter = Counter()
    launches = Counter()
    runtime_us = Counter()
    for r in runtime:
        if step_of(r) is None:
            continue
        name = r["name"]
        runtime_us[name] += float(r.get("dur", 0))
        if name in LAUNCH_RUNTIME:
            launches[name] += 1
        blocking_copy = name in ("cudaMemcpy", "cuMemcpyDtoH", "cuMemcpy", "cudaMemcpyFromSymbol")
        if name in SYNC_RUNTIME or blocking_copy:
            syncs[name] += 1
            chain = op_chain(r)
            sync_sources[f"{name} <- " + (" > ".join(chain[-4:]) or "(no aten op)")] += 1
            py = [f for f in py_chain(r) if f.startswith(("transformers/", "benchmarks/", "models/"))]
            if py:
                sync_py[f"{name} <- " + " > ".join(py[-3:])] += 1

    data_ops, data_op_sources, data_op_py = Counter(), Counter(), Counter()
    for evs in host.values():
        for e in evs:
            if e.get("cat") == "cpu_op" and e["name"] in DATA_DEPENDENT_OPS and step_of(e) is not None:
                data_ops[e["name"]] += 1
                chain = op_chain(e)
                if not chain or chain[-1] not in DATA_DEPENDENT_OPS:  # the outermost of a nested chain only
                    data_op_sources[" > ".join(chain[-3:] + [e["name"]])] += 1
                    py = [f for f in py_chain(e) if f.startswith(("transformers/", "benchmarks/", "models/"))]
                    if py:
                        data_op_py[e["name"] + " <- " + " > ".join(py[-3:])] += 1

    steps_out = []
    for s in range(steps):
        ps = per_step[s]
        span = (ps["last_end"] - ps["first_ts"]) if ps["first_ts"] is not None else 0.0
        steps_out.append({"step": s, "kernels": ps["kernels"], "kernel_ms": ps["kernel_us"] / 1e3,
                          "memcpy": ps["memcpy"], "memcpy_dtoh": ps["dtoh"], "memset": ps["memset"],
                          "gpu_span_ms": span / 1e3, "host_range_ms": step_wall.get(s, 0) / 1e3})
    n = max(steps, 1)

    def per(c: Counter) -> dict:
        return {k: v / n for k, v in c.most_common()}

    summary = {
        "profiled_steps": steps,
        "kernels_per_step": statistics.mean(x["kernels"] for x in steps_out) if steps_out else 0,
        "kernel_ms_per_step": statistics.mean(x["kernel_ms"] for x in steps_out) if steps_out else 0,
        "gpu_span_ms_per_step": statistics.mean(x["gpu_span_ms"] for x in steps_out) if steps_out else 0,
        "host_range_ms_per_step_profiled": statistics.mean(x["host_range_ms"] for x in steps_out) if steps_out else 0,
        "memcpy_per_step": statistics.mean(x["memcpy"] for x in steps_out) if steps_out else 0,
        "memcpy_dtoh_per_step": statistics.mean(x["memcpy_dtoh"] for x in steps_out) if steps_out else 0,
        "launch_calls_per_step": per(launches),
        "sync_calls_per_step": per(syncs),
        "syncs_per_step": sum(syncs.values()) / n,
        "sync_sources_per_step": per(sync_sources),
        "sync_python_sources_per_step": per(sync_py),
        "dtoh_sources_per_step": per(dtoh_sources),
        "memcpy_sources_per_step": per(memcpy_sources),
        "data_dependent_ops_per_step": per(data_ops),
        "data_dependent_op_sources_per_step": per(data_op_sources),
        "data_dependent_op_python_sources_per_step": per(data_op_py),
        "runtime_us_per_step": {k: round(v / n, 1) for k, v in runtime_us.most_common(12)},
        "kernel_time_by_launching_op": sorted(
            ({"op": k, "kernels_per_step": v[0] / n, "gpu_us_per_step": round(v[1] / n, 1)} for k, v in kernel_by_op.items()),
            key=lambda r: -r["gpu_us_per_step"])[:20],
        "top_kernels": sorted(
            ({"kernel": k, "count_per_step": v[0] / n, "gpu_us_per_step": round(v[1] / n, 1)} for k, v in kernel_by_name.items()),
            key=lambda r: -r["gpu_us_per_step"])[:12],
        "device_events_unattributed": unattributed,
        "per_step": steps_out,
    }
    return summary


# ---------------------------------------------------------------------------------------------
# experts hit


def experts_hit(dec: Decoder, steps: int) -> dict | None:
    routers = router_modules(dec.model)
    if not routers:
        return None
    recorded: list[list] = [[] for _ in routers]
    handles = []
    dec.reset()
    for i, r in enumerate(routers):
        def hook(mod, inp, out, i=i):
            idx = out[-1] if isinstance(out, tuple) else out
            recorded[i].append(idx.detach().clone())
        handles.append(r.register_forward_hook(hook))
    try:
        with torch.inference_mode():
            for _ in range(steps):
                dec.step()
        sync(dec.device)
    finally:
        for h in handles:
            h.remove()
    per_layer = []
    for layer in recorded:
        per_layer.append([int(torch.unique(t).numel()) for t in layer])
    flat = [x for layer in per_layer for x in layer]
    num_experts = getattr(routers[0], "num_experts", None)
    top_k = getattr(routers[0], "top_k", None)
    expected = None
    if num_experts and top_k:
        # uniform routing: each token picks k distinct experts; P(an expert is unhit) = ((E-k)/E)^batch
        expected = num_experts * (1 - ((num_experts - top_k) / num_experts) ** dec.batch)
    return {"steps": steps, "layers": len(routers), "num_experts": num_experts, "top_k": top_k,
            "mean_distinct_experts_per_layer_step": statistics.mean(flat), "min": min(flat), "max": max(flat),
            "mean_per_layer": [round(statistics.mean(x), 2) for x in per_layer],
            "uniform_routing_expectation": expected,
            "histogram": dict(sorted(Counter(flat).items()))}


def expert_bytes(model) -> int | None:
    mods = experts_modules(model)
    if not mods:
        return None
    m = mods[0]
    total = 0
    for name in ("gate_up_proj", "up_proj", "down_proj"):
        p = getattr(m, name, None)
        if isinstance(p, torch.nn.Parameter):
            total += p[0].numel() * p.element_size()
    return total


# ---------------------------------------------------------------------------------------------
# grouped_mm alone


def micro_experts(model, device: str, reps: int = 50) -> dict:
    """One layer's experts: grouped_mm (up and down, as transformers calls it) on h experts hit with
    one row each, against a per-expert F.linear loop over the same weights; CUDA-event timing."""
    mods = experts_modules(model)
    m = mods[0]
    gu, dn = m.gate_up_proj, m.down_proj  # (E, 2I, H), (E, H, I)
    E, H = gu.shape[0], gu.shape[2]
    inter = dn.shape[2]
    gm = getattr(torch.nn.functional, "grouped_mm", None) or torch._grouped_mm
    per_expert_bytes = (gu[0].numel() + dn[0].numel()) * gu.element_size()
    out = {"function": getattr(gm, "__module__", "") + "." + getattr(gm, "__name__", str(gm)), "experts": E,
           "per_expert_weight_MB": per_expert_bytes / 1e6, "rows": []}

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps * 1e3  # us

    with torch.inference_mode():
        for hit in (1, 2, 3, 4, 6, 8):
            for rows_per_expert in (1, 2):
                counts = torch.zeros(E, dtype=torch.int32)
                counts[:hit] = rows_per_expert
                offs = torch.cumsum(counts, 0, dtype=torch.int32).to(device)
                rows = hit * rows_per_expert
                x = torch.randn(rows, H, device=device, dtype=gu.dtype)
                h = torch.randn(rows, inter, device=device, dtype=gu.dtype)
                up_us = timed(lambda: gm(x, gu.transpose(-2, -1), offs=offs))
                down_us = timed(lambda: gm(h, dn.transpose(-2, -1), offs=offs))

                def loop():
                    for e in range(hit):
                        sl = slice(e * rows_per_expert, (e + 1) * rows_per_expert)
                        torch.nn.functional.linear(x[sl], gu[e])
                        torch.nn.functional.linear(h[sl], dn[e])
                loop_us = timed(loop)
                moved = hit * per_expert_bytes
                out["rows"].append({
                    "experts_hit": hit, "rows_per_expert": rows_per_expert,
                    "grouped_mm_up_us": round(up_us, 1), "grouped_mm_down_us": round(down_us, 1),
                    "grouped_mm_total_us": round(up_us + down_us, 1),
                    "grouped_mm_GBps": round(moved / ((up_us + down_us) * 1e-6) / 1e9, 0),
                    "linear_loop_us": round(loop_us, 1),
                    "linear_loop_GBps": round(moved / (loop_us * 1e-6) / 1e9, 0)})
                print("micro", out["rows"][-1], flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# generate() per token, as devicefit's generation scenario times it


def _generation_config(model, new: int):
    from transformers import GenerationConfig

    pad = getattr(model.config, "pad_token_id", None)
    eos = getattr(model.config, "eos_token_id", None)
    return GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False,
                            pad_token_id=pad if pad is not None else (eos if isinstance(eos, int) else 0))


def generate_tpot(model, device: str, batch: int, prompt: int, new: int, seed: int, requests: int = 4,
                  profile_at: int = 30, profile_steps_n: int = 3) -> dict:
    """generate() as devicefit's generation scenario runs it (TokenTimer: a synchronize and a
    timestamp per new token, in a logits processor), a warm-up request then `requests` timed
    ones; then one more request with the profiler on for `profile_steps_n` whole generate steps
    (token selection, stopping check, input preparation, forward), each from one logits-processor
    call to the next."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from benchmark_runners.generation import TokenTimer, logits_processor

    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, prompt), generator=torch.Generator().manual_seed(seed)).to(device)
    mask = torch.ones_like(ids)
    timer = TokenTimer(lambda: sync(device))
    cfg = _generation_config(model, new)
    res, steps_all = [], []
    with torch.inference_mode():
        for i in range(requests + 1):
            timer.begin()
            model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg, logits_processor=[logits_processor(timer)])
            timer.end()
            if i > 0:  # the first is a warm-up
                r = timer.requests[-1]
                steps_ms = [x / 1e6 for x in r.step_ns]
                steps_all += steps_ms
                res.append({"ttft_ms": round(r.ttft_ns / 1e6, 3), "tpot_median_ms": round(statistics.median(steps_ms), 3),
                            "tpot_min_ms": round(min(steps_ms), 3), "tpot_max_ms": round(max(steps_ms), 3)})
    steps_all.sort()
    out = {"batch": batch, "prompt": prompt, "new_tokens": new, "requests": res,
           "tpot_median_ms": statistics.median(x["tpot_median_ms"] for x in res),
           "tpot_pooled_p10_ms": steps_all[len(steps_all) // 10], "tpot_pooled_p90_ms": steps_all[9 * len(steps_all) // 10]}

    if profile_steps_n > 0:
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        prof = profile(activities=acts, record_shapes=False)
        state = {"n": 0, "range": None}

        class _Hook:
            def __call__(self, input_ids, scores):
                sync(device)  # as TokenTimer does
                n = state["n"]
                if state["range"] is not None:
                    state["range"].__exit__(None, None, None)
                    state["range"] = None
                if n == profile_at:
                    prof.start()
                if profile_at <= n < profile_at + profile_steps_n:
                    state["range"] = record_function(f"decode_step_{n - profile_at}")
                    state["range"].__enter__()
                if n == profile_at + profile_steps_n:
                    prof.stop()
                state["n"] += 1
                return scores

        from transformers import LogitsProcessor

        class _Proc(LogitsProcessor):
            def __call__(self, input_ids, scores):
                return hook(input_ids, scores)

        hook = _Hook()
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg, logits_processor=[_Proc()])
        parsed = parse_trace(chrome_trace(prof), profile_steps_n)
        parsed["top_cpu_self"] = top_cpu_self(prof, profile_steps_n)
        parsed["attention_ops"] = attention_ops(prof, profile_steps_n)
        out["profile"] = parsed
    return out


# ---------------------------------------------------------------------------------------------


def build_on(name: str, device: str, dtype) -> tuple:
    from models.loading import build
    from models.resolve import resolve_model

    t0 = time.perf_counter()
    spec = resolve_model(name)
    built = build(spec, dtype)  # fp32 on the host with seeded weights, then cast (models.loading)
    t1 = time.perf_counter()
    model = built.model.to(device).eval()
    sync(device)
    t2 = time.perf_counter()
    params = sum(p.numel() for p in model.parameters())
    info = {"model": name, "spec_name": spec.name, "architecture": spec.architecture, "params": params,
            "weights_recipe": built.weights_recipe, "host_build_s": round(t1 - t0, 1), "to_device_s": round(t2 - t1, 1),
            "experts_implementation": experts_impl(model), "attn_implementation": getattr(model.config, "_attn_implementation", None)}
    print("built", info, flush=True)
    return model, info


def measure_batch(model, args, batch: int, label: str, want_experts: bool, budget: Budget,
                  prefill_impl: str | None = None) -> dict:
    t0 = time.perf_counter()
    row: dict = {"label": label, "batch": batch}
    dec = Decoder(model, args.device, batch, args.prompt, args.seed, prefill_impl=prefill_impl)
    # every phase decodes from the prompt again over the same cache lengths: run them once first
    cold_steps = max(args.timed_steps + 3, args.profiled_steps + 5) + 1
    dec.reset()
    a = time.perf_counter()
    warm(dec, cold_steps, passes=1)
    row["first_pass_ms_per_step_cold"] = round((time.perf_counter() - a) * 1e3 / cold_steps, 2)  # includes one prefill
    row["timing"] = time_steps(dec, args.timed_steps)
    prof = profile_steps(dec, args.profiled_steps)
    row["profile"] = prof
    if (prof["syncs_per_step"] > 0 or prof["data_dependent_ops_per_step"]) and budget.left() > 30:
        try:
            stack = profile_steps(dec, 1, with_stack=True)
            row["sync_python_sources_per_step"] = stack["sync_python_sources_per_step"]
            row["sync_sources_with_stack_profile"] = stack["sync_sources_per_step"]
            row["data_dependent_op_python_sources_per_step"] = stack["data_dependent_op_python_sources_per_step"]
        except Exception as exc:  # noqa: BLE001
            row["sync_python_sources_error"] = repr(exc)
    if want_experts:
        row["experts_hit"] = experts_hit(dec, args.timed_steps)
    if args.device.startswith("cuda"):
        row["max_memory_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    t = row["timing"]
    print(f"{label} bs{batch}: cold {row['first_pass_ms_per_step_cold']} ms/step; wall {t['wall_ms_per_step_pipelined']:.2f} ms pipelined, "
          f"{t['wall_ms_per_step_synced_median']:.2f} synced, host call {t['host_call_ms_per_step_median_pipelined']:.2f}; "
          f"kernels {prof['kernels_per_step']:.0f}, GPU {prof['kernel_ms_per_step']:.2f} ms, syncs {prof['syncs_per_step']:.1f} "
          f"{prof['sync_sources_per_step']}, data-dep ops {prof['data_dependent_ops_per_step']} ({row['seconds']} s)", flush=True)
    del dec
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def summary_text(result: dict) -> str:
    env = result["environment"]
    lines = [f"moe_decode_profile: {env.get('gpu', env['device'])}, python {env['python']}, torch {env['torch']} "
             f"(cuda {env['cuda']}), transformers {env['transformers']}",
             f"prompt {result['args']['prompt']}, timed steps {result['args']['timed_steps']}, profiled steps "
             f"{result['args']['profiled_steps']}; wall = perf_counter, one synchronize per {result['args']['timed_steps']} "
             "steps (pipelined) or after every step (synced)", ""]
    for m in result.get("models", []):
        lines.append(f"== {m['info']['model']} ({m['info']['params'] / 1e9:.2f}B params, experts impl "
                     f"{m['info'].get('experts_implementation')}, built {m['info']['host_build_s']} s + {m['info']['to_device_s']} s)")
        lines.append("label | bs | wall ms pipelined | wall ms synced | host call ms | kernels/step | GPU kernel ms/step | "
                     "GPU span ms | syncs/step | DtoH/step | data-dep ops/step | experts hit/layer")
        for r in m["rows"]:
            t, p = r["timing"], r["profile"]
            eh = r.get("experts_hit")
            lines.append(
                f"{r['label']} | {r['batch']} | {t['wall_ms_per_step_pipelined']:.2f} | {t['wall_ms_per_step_synced_median']:.2f} | "
                f"{t['host_call_ms_per_step_median_pipelined']:.2f} | {p['kernels_per_step']:.1f} | {p['kernel_ms_per_step']:.3f} | "
                f"{p['gpu_span_ms_per_step']:.3f} | {p['syncs_per_step']:.1f} | {p['memcpy_dtoh_per_step']:.1f} | "
                f"{p['data_dependent_ops_per_step']} | "
                + (f"{eh['mean_distinct_experts_per_layer_step']:.2f} (uniform {eh['uniform_routing_expectation']:.2f})" if eh else "-"))
        for r in m["rows"]:
            p = r["profile"]
            lines.append(f"-- {r['label']} bs{r['batch']}: sync sources {p['sync_sources_per_step']}; "
                         f"python {r.get('sync_python_sources_per_step', {})}; DtoH {p['dtoh_sources_per_step']}")
            lines.append(f"   data-dependent ops from {p['data_dependent_op_sources_per_step']}; "
                         f"python {r.get('data_dependent_op_python_sources_per_step', {})}")
            lines.append(f"   runtime us/step: {p['runtime_us_per_step']}; launches/step {p['launch_calls_per_step']}")
            lines.append("   GPU us/step by launching op: " + ", ".join(
                f"{x['op']} {x['gpu_us_per_step']} ({x['kernels_per_step']:g})" for x in p["kernel_time_by_launching_op"][:8]))
            lines.append("   top CPU self us/step: " + ", ".join(
                f"{x['name']} {x['self_cpu_us_per_step']} ({x['calls_per_step']:g})" for x in p.get("top_cpu_self", [])[:10]))
            lines.append(f"   attention ops: {[(x['name'], x['cpu_total_us_per_step']) for x in p.get('attention_ops', [])[:3]]}; "
                         f"memcpy {p.get('memcpy_sources_per_step')}; first pass (cold) {r.get('first_pass_ms_per_step_cold')} ms/step")
        lines.append("")
    if "micro" in result:
        lines.append("== grouped_mm alone, one layer's experts (" + result["micro"]["function"] + ")")
        lines.append("experts hit | rows/expert | grouped_mm up+down us | GB/s | F.linear loop us | GB/s")
        for r in result["micro"]["rows"]:
            lines.append(f"{r['experts_hit']} | {r['rows_per_expert']} | {r['grouped_mm_up_us']}+{r['grouped_mm_down_us']}="
                         f"{r['grouped_mm_total_us']} | {r['grouped_mm_GBps']} | {r['linear_loop_us']} | {r['linear_loop_GBps']}")
        lines.append("")
    for g in result.get("generate", []):
        lines.append(f"generate() {g.get('model')} bs{g['batch']}: TPOT median {g['tpot_median_ms']:.2f} ms "
                     f"(pooled p10 {g['tpot_pooled_p10_ms']:.2f}, p90 {g['tpot_pooled_p90_ms']:.2f}; {g['requests']})")
        p = g.get("profile")
        if p:
            lines.append(f"   profiled generate steps: kernels {p['kernels_per_step']:.1f}, GPU kernel {p['kernel_ms_per_step']:.3f} ms, "
                         f"GPU span {p['gpu_span_ms_per_step']:.3f} ms, step range {p['host_range_ms_per_step_profiled']:.3f} ms, "
                         f"syncs {p['syncs_per_step']:.1f} {p['sync_sources_per_step']}, DtoH {p['memcpy_dtoh_per_step']:.1f}, "
                         f"data-dep ops {p['data_dependent_op_sources_per_step']}")
            lines.append("   GPU us/step by launching op: " + ", ".join(
                f"{x['op']} {x['gpu_us_per_step']} ({x['kernels_per_step']:g})" for x in p["kernel_time_by_launching_op"][:8]))
            lines.append("   top CPU self us/step: " + ", ".join(
                f"{x['name']} {x['self_cpu_us_per_step']} ({x['calls_per_step']:g})" for x in p.get("top_cpu_self", [])[:10]))
            lines.append(f"   attention ops: {[(x['name'], x['cpu_total_us_per_step']) for x in p.get('attention_ops', [])[:3]]}; "
                         f"runtime us/step {p['runtime_us_per_step']}")
    for e in result.get("errors", []):
        lines.append(f"ERROR {e['where']}: {e['error']}")
    lines.append(f"total {result.get('elapsed_s')} s")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="benchmarks/configs/mixtral-8x7b-4layers.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--batches", default="1,4", help="measured first, before generate()")
    ap.add_argument("--more-batches", default="2,8,16", help="measured after generate()")
    ap.add_argument("--generate-batches", default="1,4")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--timed-steps", type=int, default=20)
    ap.add_argument("--profiled-steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--impls", default="", help="other experts implementations to contrast, e.g. eager,batched_mm")
    ap.add_argument("--impl-batches", default="1,4")
    ap.add_argument("--micro", action="store_true")
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--dense", default="", help="dense models to contrast, e.g. gpt2,qwen2.5-0.5b")
    ap.add_argument("--dense-batches", default="1,4")
    ap.add_argument("--budget-s", type=float, default=190, help="sections that would start past this are skipped")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()

    budget = Budget(args.budget_s)
    torch.manual_seed(args.seed)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"args": vars(args), "environment": environment(args.device), "models": [], "errors": [], "skipped": []}

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        (out / "moe_decode_profile.json").write_text(json.dumps(result, indent=1, default=str))
        (out / "moe_decode_profile.txt").write_text(summary_text(result))

    def attempt(where: str, fn, need_s: float = 10):
        if budget.left() < need_s:
            result["skipped"].append(where)
            print(f"skipped {where}: {budget.left():.0f} s left", flush=True)
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - record and go on
            traceback.print_exc()
            result["errors"].append({"where": where, "error": repr(exc)})
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
            return None
        finally:
            save()

    model, info = build_on(args.model, args.device, dtype)
    entry = {"info": info, "rows": []}
    result["models"].append(entry)
    is_moe = bool(experts_modules(model))
    if is_moe:
        info["expert_weight_bytes_per_expert_per_layer"] = expert_bytes(model)
    save()
    impl0 = info.get("experts_implementation") or "default"
    result["generate"] = []

    def gen(m, name, b):
        g = attempt(f"generate {name} bs{b}", lambda: generate_tpot(m, args.device, b, args.prompt, 64, args.seed), need_s=15)
        if g:
            g["model"] = name
            result["generate"].append(g)

    for b in [int(x) for x in args.batches.split(",") if x]:
        row = attempt(f"{impl0} bs{b}", lambda b=b: measure_batch(model, args, b, impl0, is_moe, budget), need_s=12)
        if row:
            entry["rows"].append(row)
    if args.generate:
        for b in [int(x) for x in args.generate_batches.split(",") if x]:
            gen(model, args.model, b)
    for b in [int(x) for x in args.more_batches.split(",") if x]:
        row = attempt(f"{impl0} bs{b}", lambda b=b: measure_batch(model, args, b, impl0, is_moe, budget), need_s=12)
        if row:
            entry["rows"].append(row)
    if is_moe and args.micro and args.device.startswith("cuda"):
        m = attempt("micro", lambda: micro_experts(model, args.device), need_s=15)
        if m:
            result["micro"] = m
    if is_moe:
        for impl in [i for i in args.impls.split(",") if i]:
            got = attempt(f"set {impl}", lambda impl=impl: set_experts_impl(model, impl), need_s=12)
            if got != impl:
                result["errors"].append({"where": f"set {impl}", "error": f"experts implementation is {got!r}"})
                continue
            for b in [int(x) for x in args.impl_batches.split(",") if x]:
                row = attempt(f"{impl} bs{b}", lambda b=b, impl=impl: measure_batch(model, args, b, impl, True, budget,
                                                                                   prefill_impl=impl0), need_s=12)
                if row:
                    entry["rows"].append(row)
        if args.impls:
            set_experts_impl(model, impl0)
    model = None  # frees the GPU before the next model
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    for name in [d for d in args.dense.split(",") if d]:
        if budget.left() < 20:
            result["skipped"].append(f"dense {name}")
            continue
        built = attempt(f"build {name}", lambda name=name: build_on(name, args.device, dtype), need_s=20)
        if not built:
            continue
        dm, dinfo = built
        dentry = {"info": dinfo, "rows": []}
        result["models"].append(dentry)
        for b in [int(x) for x in args.dense_batches.split(",") if x]:
            row = attempt(f"{name} bs{b}", lambda b=b: measure_batch(dm, args, b, "dense", False, budget), need_s=8)
            if row:
                dentry["rows"].append(row)
        if args.generate:
            for b in [int(x) for x in args.generate_batches.split(",") if x]:
                gen(dm, name, b)
        dm = None
        gc.collect()
    save()
    print(summary_text(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
