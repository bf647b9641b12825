"""The device fleet: every device a measurement can run on, as a registered entity with a stable
id, its physical description, its host, the constraint profile it is used under, and its own
probe figures measured under that profile (issue 17, step 1: devices as entities)."""
