"""Versioned output contracts: each published document has a format and a JSON Schema generated
from its pydantic model, written beside it; a document breaking its contract is never published."""
import json

import jsonschema
import pytest

from devicefit import contracts
from devicefit.benchmark_snapshot import build_snapshot
from devicefit.contracts import ContractError


def _snapshot_row(**change):
    row = {"model": "bert-tiny", "family": "embedding", "backend": "torch", "device_kind": "cpu", "precision": "fp32",
           "mode": "inference", "batch_size": 1, "seq_length": 128, "runs": 1, "rows": 1, "p50_ms": 1.5, "p95_ms": 1.7,
           "throughput_samples_per_s": 660.0, "peak_rss_bytes": 3e8, "speedup_vs_cpu_fp32": 1.0, "is_best_precision": True}
    return {**row, **change}


def test_every_contract_has_a_versioned_format_and_a_json_schema():
    for name in contracts.CONTRACTS:
        schema = contracts.json_schema(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        fmt = schema["properties"]["format"]
        assert fmt["const"].startswith("devicefit.") and fmt["const"].rsplit("/", 1)[1].isdigit()
        assert "format" in schema["required"]


def test_publishing_validates_writes_the_schemas_and_keeps_the_old_file_on_a_broken_document(tmp_path):
    path = tmp_path / "benchmarks.json"
    good = build_snapshot([_snapshot_row()], tmp_path / "devicefit.duckdb")
    contracts.publish(path, good)
    schemas = sorted(p.name for p in (tmp_path / "schemas").iterdir())
    assert schemas == sorted(contracts.schema_name(n) for n in contracts.CONTRACTS)
    # A consumer validates what it reads with the published schema, without devicefit.
    schema = json.loads((tmp_path / "schemas" / "benchmarks.schema.json").read_text())
    jsonschema.validate(json.loads(path.read_text()), schema)
    broken = build_snapshot([_snapshot_row(p50_ms=-1.0)], tmp_path / "devicefit.duckdb")
    with pytest.raises(ContractError, match=r"benchmarks.json breaks its contract .*rows\[0\]\.p50_ms"):
        contracts.publish(path, broken)
    assert json.loads(path.read_text()) == good  # the published file is untouched
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)  # and a consumer's validator refuses it too


def test_a_document_of_another_format_version_is_refused():
    doc = build_snapshot([_snapshot_row()], "x")
    contracts.validate("benchmarks.json", doc)
    with pytest.raises(ContractError, match="format"):
        contracts.validate("benchmarks.json", {**doc, "format": "devicefit.benchmark_snapshot/0"})
    with pytest.raises(ContractError, match="surprise: Extra inputs are not permitted"):
        contracts.validate("benchmarks.json", {**doc, "surprise": 1})  # top level is closed
