"""The bus's enforcement of a channel's storm controls (`StormControls`)."""

from collections import deque

from ..._contracts._record import Refused


class RateWindow:
    """The times of one member's delivered records within a channel's sliding window."""

    def __init__(self, count: int, seconds: float) -> None:
        self._count = count
        self._seconds = seconds
        self._times: deque[float] = deque()

    def check(self, now: float) -> None:
        # drop what left the window, then refuse a record that would make one too many
        while self._times and self._times[0] <= now - self._seconds:
            self._times.popleft()
        if len(self._times) >= self._count:
            retry = self._times[0] + self._seconds - now
            raise Refused(
                "rate",
                f"Write refused: rate limit of {self._count} writes per "
                f"{self._seconds:g} seconds reached for this member and its subagents. "
                f"Retry in {retry:.1f} seconds.",
            )

    def record(self, now: float) -> None:
        self._times.append(now)
