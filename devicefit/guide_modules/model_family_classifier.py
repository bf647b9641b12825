"""Guide name (003) for models.classifier."""
from models.classifier import Classification, classify_model

__all__ = ["Classification", "classify_model"]
