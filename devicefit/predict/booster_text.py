"""A LightGBM model string checked whole before LightGBM parses it.

LightGBM parses a model string's trees in parallel, each at the offset its header's `tree_sizes`
gives, and a parse error inside that parallel region is not an exception Python can catch: a
published artifact whose booster text was cut short (a truncated copy, an edit) ended `devicefit
predict` and the API server with "terminate called without an active exception" (SIGABRT) or a
segmentation fault, instead of the artifact's "damaged: retrain" error. So the text's frame is
checked first: every tree at the offset its size says, `end of trees` after the last, and the
parameters and the closing `pandas_categorical` line, as `Booster.model_to_string` writes them."""
from __future__ import annotations

from typing import Any


class BoosterTextError(ValueError):
    """A model string LightGBM did not write whole, said in words."""


def check_booster_text(text: Any) -> str:
    """`text` when it is a whole model string as LightGBM writes it; else BoosterTextError."""
    if not isinstance(text, str) or not text.startswith("tree\n"):
        raise BoosterTextError(f"a booster is not a LightGBM model string (it starts {str(text)[:20]!r})")
    header_end = text.find("\n\n")
    sizes_line = next((line for line in text[:max(header_end, 0)].split("\n") if line.startswith("tree_sizes=")), None)
    if header_end < 0 or sizes_line is None:
        raise BoosterTextError("a booster's model string has no tree_sizes in its header: it was cut short or not written by LightGBM")
    try:
        sizes = [int(x) for x in sizes_line.removeprefix("tree_sizes=").split()]
    except ValueError:
        raise BoosterTextError(f"a booster's tree_sizes are not whole numbers ({sizes_line[:60]!r})") from None
    offset = header_end + 2
    for i, size in enumerate(sizes):
        if size <= 0 or not text.startswith(f"Tree={i}\n", offset):
            raise BoosterTextError(f"a booster's model string does not hold tree {i} of {len(sizes)} where its header says: "
                                   "it was cut short or edited")
        offset += size
    if not text.startswith("end of trees", offset):
        raise BoosterTextError(f"a booster's model string has no 'end of trees' after its {len(sizes)} trees: it was cut short or edited")
    tail = text[offset:]
    if "\nend of parameters\n" not in tail or not tail.rstrip("\n").rsplit("\n", 1)[-1].startswith("pandas_categorical:"):
        raise BoosterTextError("a booster's model string ends before its parameters do: it was cut short")
    return text


def load_booster(text: Any):
    """The LightGBM booster of a checked model string."""
    from devicefit.predict.booster_settings import lightgbm

    lgb = lightgbm()

    return lgb.Booster(model_str=check_booster_text(text))
