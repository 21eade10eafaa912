"""Which providers are configured: base URL, key, cache TTL and rate limit from the settings."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import SecretStr

from shared.errors import ProviderNotConfiguredError
from shared.settings import KEYED_PROVIDERS, Settings

__all__ = ["Provider", "provider"]


@dataclass(frozen=True)
class Provider:
    """One external provider: where it is, how to authenticate, how long and fast to ask."""

    name: str
    base_url: str
    key: SecretStr | None = None
    cache_ttl_s: int = 3600
    rate_per_s: float = 1.0

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` under the base URL."""
        return f"{self.base_url.rstrip('/')}/{path.lstrip('/')}"

    def secret(self) -> str:
        """The key's value (only called for providers that need one)."""
        return self.key.get_secret_value() if self.key is not None else ""


def provider(settings: Settings, name: str) -> Provider:
    """The provider ``name`` as the settings configure it.

    Args:
        settings: the service settings (``settings.providers``).
        name: ``nominatim``, ``photon``, ``here``, ``mapbox``, ``osrm``, ``owm``,
            ``opentopodata`` or ``kadastr``.

    Returns:
        The provider.

    Raises:
        ProviderNotConfiguredError: its URL (or its key, where it needs one) is not set.
    """
    conf = settings.providers.named(name)
    base_url, key = conf.url, conf.api_key if name in KEYED_PROVIDERS else None
    env = f"MAPSVC_{name.upper()}"
    if base_url is None:
        raise ProviderNotConfiguredError(
            f"provider {name} is not configured (set {env}_URL)", provider=name
        )
    if name in KEYED_PROVIDERS and key is None:
        raise ProviderNotConfiguredError(
            f"provider {name} is not configured (set {env}_API_KEY)", provider=name
        )
    return Provider(
        name=name,
        base_url=base_url,
        key=key,
        cache_ttl_s=conf.cache_ttl_s,
        rate_per_s=conf.rate_per_s,
    )
