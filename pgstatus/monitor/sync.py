"""
Membership of a replica in the sync sets (``sync_by_time``,
``sync_by_bytes``), with the opt-in eviction hysteresis.

Without hysteresis a replica is in a set exactly when its lag is within the
global threshold.  With ``sync_evict_after_checks`` a member leaves only
after that many consecutive checks over the threshold (or of unknown lag),
and with ``sync_reenter_lag_*`` a replica that left comes back only at or
below the lower re-entry threshold, so a replica hovering at the threshold
does not flap in and out of the set.  One step per successful check.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgstatus.config.settings import Config


@dataclass(frozen=True, slots=True)
class Membership:
    """
    A replica's place in one sync set after a check.

    :ivar member: in the set.
    :ivar over: consecutive checks over the threshold while still a member.
    """

    member: bool
    over: int = 0


def step(state: Membership | None, lag: int | None, limit: int, reenter: int | None,
         evict_after: int) -> Membership:
    """
    One successful check's step of a replica's membership in a sync set.

    :param state: the membership after the previous check, ``None`` before
        the first check (or after the host was dead).
    :param lag: the replica's lag, ``None`` if unknown.
    :param limit: the set's threshold.
    :param reenter: the re-entry threshold, ``None`` for ``limit``.
    :param evict_after: checks over ``limit`` that evict a member (0 or 1:
        the first).
    """
    reenter = limit if reenter is None else min(reenter, limit)
    was_member = state.member if state is not None else None
    if lag is not None and lag <= limit and (was_member is not False or lag <= reenter):
        return Membership(True)
    if state is not None and state.member:
        over = state.over + 1
        if over >= max(evict_after, 1):
            return Membership(False)
        return Membership(True, over)
    return Membership(False)


def note(config: Config, lag_ms: int | None, lag_bytes: int | None,
         in_time: bool, in_bytes: bool) -> str:
    """
    Why a replica is out of a sync set, in words (``sync_note``).
    """
    parts = []
    for name, lag, limit, reenter, ok in (
            ("lag_ms", lag_ms, config.sync_max_lag_ms, config.sync_reenter_lag_ms, in_time),
            ("lag_bytes", lag_bytes, config.sync_max_lag_bytes, config.sync_reenter_lag_bytes,
             in_bytes)):
        if ok:
            continue
        if lag is None:
            parts.append(f"{name} unknown")
        elif lag > limit:
            parts.append(f"{name} {lag} over {limit}")
        else:
            parts.append(f"{name} {lag} not yet back under {reenter} after eviction")
    return "; ".join(parts)
