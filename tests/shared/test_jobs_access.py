"""Who may see which job: its creator, and operators who see its layer."""

from __future__ import annotations

import pytest

from shared.auth.principal import ANONYMOUS, Principal
from shared.errors import NotFoundError
from shared.jobs import JobRecord
from shared.jobs_access import check_may_see, may_see

OWNER = Principal("key:owner", "owner", "reader", frozenset())
READER = Principal("key:reader", "reader", "reader")
OPERATOR = Principal("key:operator", "operator", "operator")
LIMITED = Principal("key:limited", "limited", "operator", frozenset({"a"}))
ADMIN = Principal("key:admin", "admin", "admin")


def job(layer: str = "", owner: str = OWNER.id) -> JobRecord:
    """A queued job of ``owner`` about ``layer``."""
    return JobRecord(
        id="j",
        kind="probe",
        params={},
        created=0.0,
        started=None,
        finished=None,
        progress=None,
        last_line=None,
        cancel_requested=False,
        outcome=None,
        result=None,
        error=None,
        worker=None,
        heartbeat=None,
        owner=owner,
        layer=layer,
    )


@pytest.mark.parametrize(
    ("record", "principal", "sees"),
    [
        (job(), OWNER, True),
        (job(), READER, False),
        (job(), ANONYMOUS, False),
        (job(owner=""), ANONYMOUS, False),  # no owner: anonymous is not its creator
        (job(), OPERATOR, True),
        (job(), LIMITED, False),  # no layer: operators limited to layers do not see it
        (job("a"), LIMITED, True),
        (job("b"), LIMITED, False),
        (job("b"), ADMIN, True),
    ],
)
def test_who_sees_a_job(record: JobRecord, principal: Principal, sees: bool) -> None:
    assert may_see(principal, record) is sees


def test_a_job_not_seen_does_not_exist() -> None:
    with pytest.raises(NotFoundError) as refused:
        check_may_see(READER, job())
    assert refused.value.detail == {"job_id": "j"}
