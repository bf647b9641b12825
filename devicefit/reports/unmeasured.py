"""The configs a run did not measure, and why: a regression check against an explicit baseline
(a run id, a file) reports a baseline config the run has no ok row for as `missing`, and where
the run skipped it (over the quick profile's call budget, no memory for it) or it failed, the
comparison says so with the row's own reason instead of leaving a reader to guess."""
from __future__ import annotations

from typing import Any, Iterable

from devicefit import store
from devicefit.reports.baselines import BaselineError, ConfigIdentity, _dims_text

# What identifies a config in any row, its input dims aside (a row skipped before its worker
# resolved the model has none): (model, device kind, backend, precision, mode, batch size,
# device profile).
Key = tuple[str, str, str, str, str, int, str | None]
# key -> [(hardware fingerprint, input dims as JSON text, what happened to it in this run)]
Unmeasured = dict[Key, list[tuple[str | None, str | None, str]]]
MAX_REASON = 240


def key_of(identity: ConfigIdentity) -> Key:
    return (identity.model, identity.device_kind, identity.backend, identity.precision, identity.mode, identity.batch_size,
            identity.device_profile)


def _text(status: str, reason_code: str | None, error: str | None) -> str:
    why = " ".join((error or "no reason recorded").split())
    why = why if len(why) <= MAX_REASON else why[:MAX_REASON - 1] + "…"
    return f"{status} in this run" + (f" ({reason_code})" if reason_code else "") + f": {why}"


def from_rows(rows: Iterable[tuple]) -> Unmeasured:
    """From (model, device or device kind, backend, precision, mode, batch size, device profile,
    input dims, hardware fingerprint, status, reason_code, error) tuples; rows neither skipped
    nor failed are passed over."""
    out: Unmeasured = {}
    for model, device, backend, precision, mode, batch, profile, dims, fingerprint, status, code, error in rows:
        if status in ("skipped", "failed"):
            key = (model, str(device).split(":")[0], backend or "torch", precision, mode, int(batch), profile or None)
            out.setdefault(key, []).append((fingerprint, _dims_text(dims), _text(status, code, error)))
    return out


def from_results(results: list[dict[str, Any]]) -> Unmeasured:
    """From BenchmarkResult JSON dicts (`BenchmarkResult.to_json()`)."""
    return from_rows((r.get("model"), r.get("device"), r.get("backend"), r.get("precision"), r.get("mode"), r.get("batch_size"),
                      r.get("device_profile"), (r.get("input") or {}).get("dims"), r.get("hardware_fingerprint"), r.get("status"),
                      r.get("reason_code"), r.get("error"))
                     for r in results if isinstance(r, dict) and r.get("status") in ("skipped", "failed"))


def in_run(database: store.Source, run_id: str) -> Unmeasured:
    """From one stored run's skipped and failed rows."""
    try:
        with store.opened(database, read_only=True) as con:
            return from_rows(store.unmeasured_rows(con, run_id))
    except store.StoreError as exc:
        raise BaselineError(str(exc)) from exc


def why_missing(unmeasured: Unmeasured | None, identity: ConfigIdentity, fingerprint: str | None) -> str | None:
    """What this run did with a baseline config it has no ok row for, where it recorded one on
    the same machine with the same inputs (or a row or baseline naming no machine or inputs: a
    skip before the worker, a CSV of medians)."""
    for theirs, dims, text in (unmeasured or {}).get(key_of(identity), []):
        if fingerprint in (None, theirs) or theirs is None:
            if identity.input_dims is None or dims is None or dims == identity.input_dims:
                return text
    return None
