"""`python -m devicefit.cli`: the product commands (without `run`; see pipelines/cli.py)."""
from devicefit.cli import app

app()
