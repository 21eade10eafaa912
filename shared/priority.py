"""CPU priority of bulk work: worker processes yield the CPU to the tiles users wait for.

Linux's scheduler (CFS) shares a contended core by weight, and a process's weight falls about
1.25 times per step of ``nice``: 1024 at 0, 335 at 5 (the API's render processes,
``shared.tiles.pool``), 110 at 10, 15 at 19. A render at 5 beside a worker process at 19 gets
335 / (335 + 15) = 96 % of the core they share; beside one at 0, 25 %.

Weights are compared within a scheduling group only. With autogroup on
(``/proc/sys/kernel/sched_autogroup_enabled``, the default of most distributions) each session
is a group, and groups share the CPU by their own nice (``/proc/<pid>/autogroup``), whatever
their processes' nice: a worker started in a session of its own (a service manager, ``setsid``)
is niced as a group too (:func:`lower_session_priority`). A control group (a container, a
systemd slice with the cpu controller) is a group by its ``cpu.weight`` alone: give a worker's
container fewer CPU shares than the API's (``compose.yaml``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["AUTOGROUP", "lower_priority", "lower_session_priority", "session_nice"]

#: the autogroup of this process: "/autogroup-<n> nice <nice>" (Linux with autogroup on)
AUTOGROUP = Path("/proc/self/autogroup")


def lower_priority(increment: int) -> int:
    """Make this process ``increment`` nicer than it is (at most 19): its children inherit it.

    Args:
        increment: steps of nice, 0 or more (lowering it needs a privilege: never asked).

    Returns:
        The process's nice now.
    """
    return os.nice(max(increment, 0))


def session_nice() -> int | None:
    """The nice of this process's autogroup; None without autogroups (not Linux, turned off)."""
    try:
        return int(AUTOGROUP.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def lower_session_priority(nice: int) -> bool:
    """Give this process's autogroup the nice ``nice`` when the process leads its session (the
    group is then the process and what it starts, nothing else of the user's), never less nice
    than it is.

    Args:
        nice: the group's nice, 0 to 19.

    Returns:
        Whether the group's nice was set: False outside a session of its own, without
        autogroups, or when the group is already that nice.
    """
    current = session_nice()
    if current is None or current >= nice or os.getsid(0) != os.getpid():
        return False
    try:
        AUTOGROUP.write_text(f"{nice}\n")
    except OSError:
        return False
    return True
