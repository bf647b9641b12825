"""Dagster wiring: Definitions, jobs, schedules, sensors, resources. No logic lives here."""
