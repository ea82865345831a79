"""JSON text as ``json.dumps`` writes it, made faster for many small values."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_text"]


def _one_encoder() -> Any:
    from json import encoder

    make = getattr(encoder, "c_make_encoder", None)
    if make is None:  # a Python without the _json accelerator
        return None
    # json.dumps' own arguments (ensure_ascii, NaN allowed, ", " and ": "),
    # without the check for a value inside itself: the store writes none.
    return make(None, json.JSONEncoder().default, encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)


_ENCODE = _one_encoder()


def json_text(value: Any) -> str:
    """``json.dumps(value)``, the same text, by one C encoder made once:
    ``json.dumps`` makes a new one for every value, which was most of the
    cost of the JSON columns when a plan writes 200,000 of them."""
    if _ENCODE is None:
        return json.dumps(value)
    return "".join(_ENCODE(value, 0))
