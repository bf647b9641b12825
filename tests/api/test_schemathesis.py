"""Property-based requests generated from the app's own OpenAPI schema (schemathesis, in process
over ASGI): no input, valid or not, may produce a 5xx, every documented response must match its
schema, and every error is the spec's JSON. Bounded in examples per operation so the suite stays
fast; derandomized so a failure reproduces."""
import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance  # noqa: E402

EXAMPLES_PER_OPERATION = 10
REQUEST_TIMEOUT_S = 300
OPERATIONS = ["GET /health", "GET /models", "GET /predictors", "GET /benchmarks", "GET /hardware/detect",
              "POST /hardware/select", "POST /hardware/batch", "POST /hardware/map", "POST /performance/predict",
              "POST /training/distributed", "POST /analysis/model"]


@pytest.fixture(scope="module")
def api_schema(measured, artifact):
    from devicefit.api.app import Settings, create_app

    return schemathesis.openapi.from_asgi("/openapi.json", create_app(Settings(benchmark_dir=measured.root, warm_models=())))


def test_every_operation_is_fuzzed(api_schema):
    assert {op.ok().label for op in api_schema.get_all_operations()} == set(OPERATIONS)


# Operations that take input; the others have no invalid request to generate.
WITH_INPUT = [op for op in OPERATIONS if op.startswith("POST") or op == "GET /benchmarks"]
CASES = [(op, GenerationMode.POSITIVE) for op in OPERATIONS] + [(op, GenerationMode.NEGATIVE) for op in WITH_INPUT]


@pytest.mark.parametrize("label, mode", CASES, ids=[f"{op}-{mode.value}" for op, mode in CASES])
def test_no_generated_request_gets_a_server_error(api_schema, label, mode):
    operation = api_schema.find_operation_by_label(label)
    seen: list[int] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        # Correctness, not speed: a cold /hardware/map on a machine a hog keeps busy can take
        # longer than schemathesis's default 10 s (speed is benchmarks/api_*.py's business).
        response = case.call(timeout=REQUEST_TIMEOUT_S)
        seen.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance, content_type_conformance])
        if response.status_code >= 400:
            body = response.json()
            assert body["status"] == "error" and body["message"], body

    check()
    assert seen
