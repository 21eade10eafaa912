"""The base of provider classes: one configured provider, asked through the shared upstream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from shared.errors import UpstreamBadAnswerError
from shared.providers._answers import Answer, parse
from shared.providers.config import Provider
from shared.providers.upstream import Upstream

__all__ = ["ProviderClient"]

_M = TypeVar("_M", bound=Answer)


class ProviderClient:
    """A provider of some capability (geocoding, routing), bound to its configuration.

    Subclasses set :attr:`name` (the provider's name in the settings) and :attr:`attribution`.
    """

    name: ClassVar[str]
    attribution: ClassVar[str]

    def __init__(self, upstream: Upstream, provider: Provider) -> None:
        """Bind the provider client ``upstream`` to the configured ``provider``."""
        self.upstream = upstream
        self.provider = provider

    async def get_json(
        self,
        path: str,
        params: Mapping[str, Any],
        *,
        secret_params: Mapping[str, str] | None = None,
        refresh: bool = False,
    ) -> Any:
        """GET ``path`` of the provider, through the cache (see :meth:`Upstream.get_json`)."""
        return await self.upstream.get_json(
            self.provider, path, params, secret_params=secret_params, refresh=refresh
        )

    def parse(self, model: type[_M], data: Any) -> _M:
        """``data`` read as ``model``; a misfit is this provider's bad answer."""
        return parse(model, data, self.provider.name)

    def bad(self, message: str) -> UpstreamBadAnswerError:
        """The error of an answer of this provider that makes no sense."""
        name = self.provider.name
        return UpstreamBadAnswerError(f"provider {name}: {message}", provider=name)
