"""Measurement: hardware detection, the timing harness, backends, input builders, memory
tracking and the isolated worker process. No Dagster import; depends only on `models`."""
