"""Python client of the devicefit REST API (spec 000's HardwareSelectionClient).

Standard library only, and the device registry (`benchmark_runners.registry`, itself standard
library only) for the torch device of a kind. A 4xx answer raises ValueError with the server's message, as the spec
shows; a 5xx, an unreachable server, one that does not answer within `timeout`, drops the
connection, redirects (3xx: never followed), or answers something that is not JSON or not the
shape of the endpoint's answer raises RuntimeError. A base URL that is not an http:// or
https:// URL of a host is refused (ValueError) when the client is made.
"""
from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The server's `message` (the spec's error shape), else FastAPI's `detail`, else the body
    itself (a proxy's page), else the reason phrase: never only "Bad Request" when more was said."""
    try:
        raw = exc.read()
    except OSError:
        return str(exc.reason)
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and (body.get("message") or body.get("detail")):
        return str(body.get("message") or body.get("detail"))
    text = raw.decode("utf-8", "replace").strip()[:500]
    return f"{exc.reason}: {text}" if text else str(exc.reason)


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Every 3xx left as the HTTPError it is: urllib re-sent a redirected POST as a GET (a 301 or
    302 ended as the new address's "405: Method Not Allowed") and followed a redirect to any host."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_RefuseRedirects)


def _redirect_message(url: str, exc: urllib.error.HTTPError) -> str:
    """What a 3xx answer to `url` said, where it pointed, and what to do about it."""
    location = exc.headers.get("Location") if exc.headers is not None else None
    where = f"a redirect to {urllib.parse.urljoin(url, location)[:300]!r}" if location else "a redirect without a Location"
    return (f"{url} answered {exc.code} {exc.reason}, {where}: the client follows no redirect (it would re-send the "
            "request as a GET, or to another host); if that is the devicefit server, give its address as base_url")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _member(url: str, answer: dict[str, Any], key: str, kind: type, described: str) -> Any:
    """`answer[key]` when it is a `kind`, else RuntimeError naming the endpoint and what was missing."""
    value = answer.get(key)
    if not isinstance(value, kind):
        got = f"got {_shown(value)}" if key in answer else f"it is missing (the answer's keys: {_shown(sorted(answer))})"
        raise RuntimeError(f"{url} answered JSON of the wrong shape: {key!r} should be {described}, {got}")
    return value


def checked_base_url(base_url: str) -> str:
    """`base_url` without its trailing '/', when it is an http:// or https:// URL of a host; else
    ValueError saying what came. urllib opens whatever URL it is given: `file:///etc/passwd#`
    read a local file and quoted it in the error, `file:///x.json#` answered detect_hardware()
    from a file, and a URL without a scheme ("127.0.0.1:8000") failed only at the first call."""
    try:
        parts = urllib.parse.urlsplit(str(base_url))
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535
    except ValueError as exc:
        raise ValueError(f"base_url {str(base_url)[:200]!r} is not a URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        hint = f" (did you mean 'http://{base_url}'?)" if "://" not in str(base_url) and str(base_url) else ""
        raise ValueError(f"base_url must be an http:// or https:// URL of the devicefit server, got {str(base_url)[:200]!r}{hint}")
    if parts.query or parts.fragment:  # each path is appended to it: "/health" would land in the query or fragment
        raise ValueError(f"base_url {str(base_url)[:200]!r} has a query or fragment: give the server's address only")
    return str(base_url).rstrip("/")


class HardwareSelectionClient:
    def __init__(self, base_url: str = "http://127.0.0.1:8000", timeout: float = 60.0):
        self.base_url = checked_base_url(base_url)
        self.timeout = timeout

    def _call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps({k: v for k, v in body.items() if v is not None}).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method="GET" if data is None else "POST",
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with _OPENER.open(request, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                raise RuntimeError(_redirect_message(self.base_url + path, exc)) from None
            message = _error_message(exc)
            if 400 <= exc.code < 500:
                raise ValueError(f"{exc.code}: {message}") from None
            raise RuntimeError(f"{exc.code}: {message}") from None
        except urllib.error.URLError as exc:
            raise RuntimeError(f"cannot reach {self.base_url}: {exc.reason}") from None
        except TimeoutError:
            raise RuntimeError(f"{self.base_url}{path} did not answer within {self.timeout} s") from None
        except (http.client.HTTPException, OSError) as exc:  # the connection dropped mid-answer
            raise RuntimeError(f"{self.base_url}{path}: connection failed: {exc or type(exc).__name__}") from None
        try:
            answer = json.loads(raw)
        except ValueError:  # not a ValueError to the caller: that is a 4xx
            raise RuntimeError(f"{self.base_url}{path} answered something that is not JSON: {raw[:200]!r}") from None
        if not isinstance(answer, dict):  # every endpoint the client calls answers an object
            raise RuntimeError(f"{self.base_url}{path} answered JSON of the wrong shape: expected an object, got {_shown(answer)}")
        return answer

    def health(self) -> dict[str, Any]:
        return self._call("/health")

    def detect_hardware(self) -> dict[str, bool]:
        return _member(self.base_url + "/hardware/detect", self._call("/hardware/detect"), "hardware", dict,
                       "an object of hardware kinds to true or false")

    def select_hardware(self, model_name: str, model_family: str | None = None, batch_size: int = 1,
                        sequence_length: int | None = None, mode: str | None = None, precision: str = "fp32",
                        available_hardware: list[str] | None = None, task_type: str | None = None, distributed: bool = False,
                        gpu_count: int = 1, max_latency_ms: float | None = None, new_tokens: int | None = None,
                        max_tpot_ms: float | None = None, max_ttft_ms: float | None = None) -> dict[str, Any]:
        """`mode` defaults to the task_type's (training for training and fine_tuning, generation
        for generation) or inference; the server refuses a mode that contradicts the task_type.
        `new_tokens`, `max_tpot_ms` and `max_ttft_ms` apply to mode (or task) generation."""
        body = {"model_name": model_name, "model_family": model_family, "batch_size": batch_size, "sequence_length": sequence_length,
                "precision": precision, "available_hardware": available_hardware, "task_type": task_type,
                "distributed": distributed, "gpu_count": gpu_count, "max_latency_ms": max_latency_ms, "new_tokens": new_tokens,
                "max_tpot_ms": max_tpot_ms, "max_ttft_ms": max_ttft_ms}
        return self._call("/hardware/select", body if mode is None else {**body, "mode": mode})

    def select_hardware_for_models(self, models: list[dict[str, str]], batch_size: int = 1, mode: str = "inference") -> dict[str, Any]:
        return self._call("/hardware/batch", {"models": models, "batch_size": batch_size, "mode": mode})

    def predict_performance(self, model_name: str, hardware: str | list[str] = "cpu", batch_size: int = 1,
                            model_family: str | None = None, sequence_length: int | None = None, mode: str = "inference",
                            precision: str = "fp32", new_tokens: int | None = None) -> dict[str, Any]:
        """`new_tokens` applies to mode generation (sequence_length is then the prompt)."""
        return self._call("/performance/predict", {
            "model_name": model_name, "model_family": model_family, "hardware": hardware, "batch_size": batch_size,
            "sequence_length": sequence_length, "mode": mode, "precision": precision, "new_tokens": new_tokens})

    def get_distributed_training_config(self, model_name: str, gpu_count: int, batch_size: int = 8,
                                        max_memory_gb: float | None = None, model_family: str | None = None,
                                        sequence_length: int | None = None) -> dict[str, Any]:
        return self._call("/training/distributed", {
            "model_name": model_name, "model_family": model_family, "gpu_count": gpu_count, "batch_size": batch_size,
            "max_memory_gb": max_memory_gb, "sequence_length": sequence_length})

    def analyze_model_performance(self, model_name: str, model_family: str | None = None,
                                  batch_sizes: list[int] | None = None) -> dict[str, Any]:
        return self._call("/analysis/model", {"model_name": model_name, "model_family": model_family, "batch_sizes": batch_sizes})

    def create_hardware_map(self, model_families: list[str] | None = None, batch_sizes: list[int] | None = None,
                            hardware_platforms: list[str] | None = None) -> dict[str, Any]:
        return self._call("/hardware/map", {"model_families": model_families, "batch_sizes": batch_sizes,
                                            "hardware_platforms": hardware_platforms})

    def get_benchmarks(self, model: str | None = None, hardware: str | None = None, precision: str | None = None,
                       batch_size: int | None = None, mode: str | None = None, backend: str | None = None,
                       limit: int = 100) -> dict[str, Any]:
        """Measured configurations (medians over runs) from the server's published snapshot."""
        filters = {"model": model, "hardware": hardware, "precision": precision, "batch_size": batch_size, "mode": mode,
                   "backend": backend, "limit": limit}
        return self._call("/benchmarks?" + urllib.parse.urlencode({k: v for k, v in filters.items() if v is not None}))

    def get_optimal_device(self, model_name: str, model_family: str | None = None, batch_size: int = 1,
                           mode: str | None = None) -> str:
        """The torch device string of the recommended hardware that is present on the server's
        machine (`cuda:0`, `mps` or `cpu`): a recommendation torch cannot run here is skipped.
        The server takes the string back wherever it takes a hardware kind (`predict_performance(
        hardware=device)` answers for its kind, keyed `device`), as spec 000's PyTorch example does."""
        from benchmark_runners import registry

        result = self.select_hardware(model_name, model_family, batch_size, mode=mode)
        url = self.base_url + "/hardware/select"
        primary = _member(url, result, "primary_recommendation", str, "a hardware kind")
        fallbacks = _member(url, result, "fallback_options", list, "a list of hardware kinds")
        for kind in [primary, *fallbacks]:
            if isinstance(kind, str) and kind in registry.torch_kinds():
                return registry.torch_device(kind)
        raise ValueError(f"no torch device among {primary}, {fallbacks}")
