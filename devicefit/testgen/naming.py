"""Which template a family's generated test comes from, and where it lies. Kept apart from the
generator so the classifier (devicefit.select) can name a template without importing the
generator, which itself asks the classifier."""
from __future__ import annotations

from pathlib import Path

TEMPLATE_DIR = Path(__file__).parent / "templates"


def template_file(template_name: str) -> Path:
    """The Jinja2 source of a template named as the classification names it."""
    return TEMPLATE_DIR / f"{template_name}.j2"


def template_for_family(family: str) -> str:
    return f"hf_{family}_template.py"
