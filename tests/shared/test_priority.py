"""Lower CPU priority: a process niced, and the autogroup of a process leading its session."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shared.priority import session_nice
from tests.conftest import ROOT

_REPORT = (
    "import os; from shared.priority import lower_priority, lower_session_priority, session_nice;"
    "print(lower_session_priority(6), session_nice(), os.nice(0), lower_priority(3))"
)


def run(*, own_session: bool) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _REPORT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        start_new_session=own_session,
    )
    return done.stdout.split()


def test_a_process_leading_its_session_nices_its_group() -> None:
    if session_nice() is None:
        pytest.skip("no autogroups here (not Linux, or kernel.sched_autogroup_enabled=0)")
    ours = session_nice()
    changed, group, nice, lowered = run(own_session=True)
    assert (changed, group) == ("True", "6")
    # the process's own nice is apart from its group's: 3 steps nicer than it was
    assert int(lowered) == min(int(nice) + 3, 19)
    assert session_nice() == ours


def test_a_process_in_another_s_session_leaves_the_group_alone() -> None:
    ours = session_nice()
    changed, group, _, _ = run(own_session=False)
    assert changed == "False"
    assert session_nice() == ours
    if ours is not None:
        assert group == str(ours)
