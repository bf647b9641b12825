"""devicefit: which hardware, backend, precision and batch size should this model run on, and
how fast and how big will it be there? The product surface over measurement (benchmark_runners)
and the models under test (models)."""

__version__ = "0.1.0"
