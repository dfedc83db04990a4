"""A sweep's schedule, as Airflow keeps it: which slots fire, and which ones got no run.

Airflow runs one run of a sweep at a time (`max_active_runs = 1`) and never catches up
(`catchup = False`): when a run outlasts its schedule's interval, the slots that fire
meanwhile get no run at all, and the next run is for the latest slot. Nothing in Airflow
says so. `benchledger run --cluster` warns when a sweep's runs have taken longer than its
interval, and each scheduled run records the slots skipped before it (`runs.skipped_slots`,
with `runs.scheduled_for`, its own slot) (issue #25).
"""

from __future__ import annotations

import statistics
from datetime import UTC, datetime

from croniter import croniter

# Presets croniter does not spell as Airflow does; @once and @continuous have no slots.
_CRON_OF = {"@quarterly": "0 0 1 */3 *"}
MAX_SKIPPED = 1000  # listed; more are counted (a sweep paused for a year at one a minute)


def _cron(schedule: str | None) -> str | None:
    if schedule in (None, "", "none", "@once", "@continuous"):
        return None
    return _CRON_OF.get(schedule, schedule)


def interval_s(schedule: str | None, start: datetime | None = None,
               fires: int = 50) -> float | None:
    """The shortest gap between two of the schedule's next `fires` slots, in seconds (the
    interval a run must fit in), or None for a schedule without slots."""
    cron = _cron(schedule)
    if cron is None:
        return None
    it = croniter(cron, start or datetime.now(UTC))
    slots = [it.get_next(datetime) for _ in range(fires)]
    return min((b - a).total_seconds() for a, b in zip(slots, slots[1:], strict=False))


def skipped_slots(schedule: str | None, previous: datetime | None,
                  this: datetime) -> tuple[list[str], int]:
    """The slots strictly between the previous successful run's slot and this run's, which
    got no run: (the first MAX_SKIPPED of them as ISO times, how many in all)."""
    cron = _cron(schedule)
    if cron is None or previous is None or previous >= this:
        return [], 0
    it = croniter(cron, previous)
    listed: list[str] = []
    count = 0
    while (slot := it.get_next(datetime)) < this:
        count += 1
        if len(listed) < MAX_SKIPPED:
            listed.append(slot.astimezone(UTC).isoformat())
    return listed, count


def overrun_note(sweep_name: str, schedule: str | None,
                 durations_s: list[float]) -> str | None:
    """What `run --cluster` says when it installs a scheduled sweep: that its runs outlast
    the interval (from the durations of its earlier runs), or, without any, what happens
    if they do. None for a sweep without a schedule."""
    interval = interval_s(schedule)
    if interval is None:
        return None
    if durations_s and (typical := statistics.median(durations_s)) > interval:
        return (f"runs of sweep {sweep_name!r} took {typical:.0f} s (median of the last "
                f"{len(durations_s)}), longer than its schedule's interval of {interval:.0f} "
                "s: Airflow runs one at a time and never catches up, so slots will be "
                "skipped; each run records those skipped before it (runs.skipped_slots)")
    if not durations_s:
        return (f"sweep {sweep_name!r} is scheduled every {interval:.0f} s at the shortest; "
                "a run that takes longer makes Airflow skip the slots that fire meanwhile "
                "(one run at a time, no catch-up); each run records them (runs.skipped_slots)")
    return None
