"""Who is calling: a principal, its role and the layers it may see."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ANONYMOUS", "ROLES", "Principal", "Role", "role_at_least"]

Role = Literal["reader", "operator", "admin"]

#: the roles, each allowed what the ones before it are
ROLES: tuple[Role, ...] = ("reader", "operator", "admin")


def role_at_least(role: Role | None, needed: Role) -> bool:
    """Whether ``role`` (None: anonymous) has the rights of ``needed``."""
    return role is not None and ROLES.index(role) >= ROLES.index(needed)


@dataclass(frozen=True)
class Principal:
    """The caller of one request.

    ``id`` is stable and unique per caller (``user:<id>``, ``key:<id>``, ``anonymous``): rate
    limits, job ownership and cache separation key on it. ``layers`` None means every layer;
    else only those ids (raster style ids and vector layer ids).
    """

    id: str
    name: str
    role: Role | None
    layers: frozenset[str] | None = None
    user_id: int | None = None

    @property
    def anonymous(self) -> bool:
        """Whether no credentials came with the request."""
        return self.role is None

    def has(self, needed: Role) -> bool:
        """Whether this principal has the rights of role ``needed``."""
        return role_at_least(self.role, needed)

    def sees(self, layer: str) -> bool:
        """Whether this principal may see layer ``layer`` (role aside)."""
        return self.layers is None or layer in self.layers


#: the caller without credentials
ANONYMOUS = Principal(id="anonymous", name="anonymous", role=None, layers=frozenset())
