"""Thin Dagster assets: each calls plain functions in devicefit/, models/ or benchmark_runners/
and adds what a person wants to see in the UI (metadata) and what guards the data (checks)."""
