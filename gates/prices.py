"""What Claude models cost, for milepost's running estimate of a streamed
Claude Code doer (milepost.gates.usage: its ``assistant`` lines carry each
API call's token counts, its cost comes only in its ``result`` line at the
end). The one place the prices are kept; docs/doers.md, "Budgets", says
where they come from and how far the estimate goes.

:data:`PRICES`: Anthropic's list prices, USD per million tokens (input,
output), by model family: the model's id without its date
(``claude-sonnet-4-5-20250929``: ``claude-sonnet-4-5``). Prompt-cache
tokens are priced by Anthropic's documented multipliers of the input price:
a 5-minute cache write 1.25x, a 1-hour one 2x, a cache read 0.1x. Long
context, batch and regional surcharges or discounts are not known here. A
plan's ``doer.prices`` adds to it or replaces its entries
(:func:`price_table`); its drive hands them to the watch as
``MILEPOST_DO_PRICES`` (:func:`prices_from_env`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pydantic import TypeAdapter, ValidationError

from milepost.graph.models import ModelName, ModelPrice

__all__ = ["PRICES", "Price", "family", "price_of", "price_table", "prices_env", "prices_from_env"]


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float

    def usd(self, usage: Mapping[str, int]) -> float:
        """What one API call's ``usage`` (Anthropic's Messages usage object, as numbers) cost."""
        one_hour = usage.get("ephemeral_1h_input_tokens", 0)
        written = max(0, usage.get("cache_creation_input_tokens", 0) - one_hour)
        tokens = (
            usage.get("input_tokens", 0) * self.input
            + usage.get("output_tokens", 0) * self.output
            + written * self.input * 1.25
            + one_hour * self.input * 2.0
            + usage.get("cache_read_input_tokens", 0) * self.input * 0.1
        )
        return tokens / 1_000_000


_OPUS_NEW, _OPUS_OLD, _SONNET = Price(5.0, 25.0), Price(15.0, 75.0), Price(3.0, 15.0)

# docs.anthropic.com/en/docs/about-claude/pricing (Opus 4 and 4.1, Claude 3 Opus, Sonnet 3.5, 3.7 and 4, Haiku 3
# and 3.5); Opus 4.5 and 4.6, Sonnet 4.5 and 4.6, Haiku 4.5: the prices reported for them; read 2026-12-05.
PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "claude-opus-4-6": _OPUS_NEW,
        "claude-opus-4-5": _OPUS_NEW,
        "claude-opus-4-1": _OPUS_OLD,
        "claude-opus-4": _OPUS_OLD,
        "claude-3-opus": _OPUS_OLD,
        "claude-sonnet-4-6": _SONNET,
        "claude-sonnet-4-5": _SONNET,
        "claude-sonnet-4": _SONNET,
        "claude-3-7-sonnet": _SONNET,
        "claude-3-5-sonnet": _SONNET,
        "claude-haiku-4-5": Price(1.0, 5.0),
        "claude-3-5-haiku": Price(0.8, 4.0),
        "claude-3-haiku": Price(0.25, 1.25),
    }
)

# A model id's tail that names no other price: a date, -latest, a Bedrock version (-v1:0), a Vertex date (@...),
# a context window ([1m]).
_TAIL = re.compile(r"(\[[^\]]*\]|@.*|-v\d+(:\d+)?|-\d{8}|-latest)$")


def family(model: str) -> str:
    """The family ``model`` is priced as: its id without a provider's prefix
    (``us.anthropic.``, ``anthropic/``) and without its date or version."""
    name = model.strip().lower()
    name = name[name.find("claude-") :] if "claude-" in name else name
    while (cut := _TAIL.sub("", name)) != name:
        name = cut
    return name


def price_of(model: str, prices: Mapping[str, Price] = PRICES) -> Price | None:
    """The price of ``model`` (an id as Claude Code prints it), or None: not known."""
    return prices.get(family(model))


def price_table(extra: Mapping[str, ModelPrice] | None = None) -> Mapping[str, Price]:
    """milepost's prices with ``extra`` (a plan's ``doer.prices``, by model id
    or family) added, or replacing milepost's own for the same family."""
    if not extra:
        return PRICES
    return MappingProxyType({**PRICES, **{family(k): Price(v.input, v.output) for k, v in extra.items()}})


_PLAN_PRICES: TypeAdapter[dict[str, ModelPrice]] = TypeAdapter(dict[ModelName, ModelPrice])


def prices_env(extra: Mapping[str, ModelPrice]) -> str:
    """A plan's ``doer.prices`` as ``MILEPOST_DO_PRICES`` holds them (JSON)."""
    return json.dumps({k: v.model_dump() for k, v in extra.items()}, sort_keys=True)


def prices_from_env(text: str | None) -> Mapping[str, Price]:
    """The price table a doer's watch uses: milepost's with the plan's from
    ``MILEPOST_DO_PRICES`` (absent or unreadable: milepost's alone)."""
    if not text:
        return PRICES
    try:
        return price_table(_PLAN_PRICES.validate_json(text))
    except ValidationError:
        return PRICES
