"""The metadata domains gdalinfo prints without ``-mdd``, and reading them."""

from __future__ import annotations

from typing import Any

__all__ = ["BAND_DOMAINS", "DATASET_DOMAINS", "metadata"]

#: Dataset metadata domains gdalinfo prints, the default one (``""``) first.
DATASET_DOMAINS = ("", "IMAGE_STRUCTURE", "TILING_SCHEME", "SUBDATASETS", "GEOLOCATION", "RPC")
#: Band metadata domains gdalinfo prints, the default one first.
BAND_DOMAINS = ("", "IMAGE_STRUCTURE")


def metadata(ds: Any, bidx: int | None, domains: tuple[str, ...]) -> dict[str, Any]:
    """The non-empty domains among ``domains``, in that order (``""`` is the default one).

    Args:
        ds: the open dataset.
        bidx: the band, or None for the dataset's own metadata.
        domains: the domains to read.

    Returns:
        Each non-empty domain's items, by domain name.
    """
    items_by_domain: dict[str, Any] = {}
    for domain in domains:
        items = ds.tags(ns=domain or None) if bidx is None else ds.tags(bidx, ns=domain or None)
        if items:
            items_by_domain[domain] = dict(items)
    return items_by_domain
