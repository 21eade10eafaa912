"""Who may see which job: its creator, and operators who see its layer.

The rule of every reading of a job (its descriptor, the jobs collection, its event stream,
cancelling it): a job another may not see is, to them, a job that does not exist.
"""

from __future__ import annotations

from shared.auth.principal import Principal
from shared.errors import NotFoundError
from shared.jobs import JobRecord

__all__ = ["check_may_see", "may_see"]


def may_see(principal: Principal, record: JobRecord) -> bool:
    """Whether ``principal`` may see the job: its creator may, and operators who see its layer
    (a job about no layer: operators not limited to layers)."""
    if record.owner and record.owner == principal.id:
        return True
    if not principal.has("operator"):
        return False
    return principal.sees(record.layer) if record.layer else principal.layers is None


def check_may_see(principal: Principal, record: JobRecord) -> None:
    """Refuse the job to all but those :func:`may_see` lets see it, as if it did not exist.

    Raises:
        NotFoundError: ``principal`` may not see the job.
    """
    if not may_see(principal, record):
        raise NotFoundError(f"no job {record.id}", job_id=record.id)
