"""The pipeline probe: a job that only reports, to check workers and the event relay end to end."""

from __future__ import annotations

import time
from typing import Any

from shared.errors import InvalidInputError, UnprocessableError
from shared.jobs import JobReporter

__all__ = ["MAX_PROBE_STEPS", "check_probe_params", "run_probe"]

MAX_PROBE_STEPS = 1000
MAX_PROBE_DELAY_MS = 10000


def check_probe_params(steps: int, delay_ms: int, fail_at: int) -> None:
    """Refuse probe parameters outside their ranges.

    Raises:
        InvalidInputError: a parameter is out of range.
    """
    if not 1 <= steps <= MAX_PROBE_STEPS:
        raise InvalidInputError(f"steps must be 1..{MAX_PROBE_STEPS}", field="steps")
    if not 0 <= delay_ms <= MAX_PROBE_DELAY_MS:
        raise InvalidInputError(f"delay_ms must be 0..{MAX_PROBE_DELAY_MS}", field="delay_ms")
    if not 0 <= fail_at <= steps:
        raise InvalidInputError("fail_at must be 0 (never) or a step number", field="fail_at")


def run_probe(report: JobReporter, *, steps: int, delay_ms: int, fail_at: int) -> dict[str, Any]:
    """Publish ``steps`` lines ``delay_ms`` apart; fail at step ``fail_at`` when it is not 0.

    Args:
        report: the job's reporter.
        steps: number of progress lines.
        delay_ms: pause before each line.
        fail_at: step at which the probe fails on purpose (0: never).

    Returns:
        The steps run and the time they took.

    Raises:
        UnprocessableError: the probe reached ``fail_at``.
    """
    check_probe_params(steps, delay_ms, fail_at)
    started = time.monotonic()
    report.line(f"Probe start: {steps} steps, {delay_ms} ms apart")
    for step in range(1, steps + 1):
        time.sleep(delay_ms / 1000)
        if step == fail_at:
            raise UnprocessableError(f"probe failed on purpose at step {step}", step=step)
        report.line(f"Probe step {step}/{steps}", progress=step / steps)
    return {"steps": steps, "ms": int((time.monotonic() - started) * 1000)}
