"""Weather (spec 2.8) from an OpenWeatherMap-compatible provider, in metric units."""

from __future__ import annotations

from typing import Any

from shared.errors import UpstreamBadAnswerError
from shared.providers.config import Provider
from shared.providers.upstream import Upstream, round_coord

__all__ = ["current_weather"]


async def current_weather(
    upstream: Upstream, provider: Provider, x: float, y: float, *, lang: str, refresh: bool = False
) -> dict[str, Any]:
    """Spec 2.8: ``{"body": <the current weather at x, y>}``, temperatures in °C.

    Args:
        upstream: the provider client.
        provider: an OpenWeatherMap-compatible provider (``/data/2.5/weather``).
        x: longitude.
        y: latitude.
        lang: language of ``weather[].description``.
        refresh: bypass the cache.

    Returns:
        The object of spec 2.8.
    """
    params = {"lat": round_coord(y), "lon": round_coord(x), "units": "metric", "lang": lang}
    body = await upstream.get_json(
        provider,
        "data/2.5/weather",
        params,
        secret_params={"appid": provider.secret()},
        refresh=refresh,
    )
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("main"), dict)
        or not isinstance(body["main"].get("temp"), int | float)
        or not isinstance(body.get("coord"), dict)
        or not isinstance(body.get("weather"), list)
    ):
        raise UpstreamBadAnswerError(
            "provider owm: the answer is not a current weather object", provider=provider.name
        )
    return {"body": body}
