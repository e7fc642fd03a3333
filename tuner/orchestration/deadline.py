"""A run's deadline (``budget.deadline``): the wall-clock bound of a whole ``tune run``, the
engine's install included, so that the first answer on a slow machine comes within it instead of
after a fixed number of trials.

The search launches a trial only while it fits before the deadline, and, once the study has a
first answer (:data:`FIRST_ANSWER` trials), while the fresh-server runs planned after the search
fit after it too; each is taken at the longest trial this run has seen (before the first ends:
the plan's estimate, :func:`tuner.orchestration.dryrun.launch_seconds`). The reference run before the search is
left out where it would leave no room for the first answer. A machine twice as slow runs fewer
trials, and the run says how many the deadline allowed. A trial runs no longer than the deadline
leaves it (:meth:`Deadline.trial_limit`): it is stopped there, its probes ending before it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from tuner.base.units import format_duration

__all__ = ["FIRST_ANSWER", "Deadline"]

FIRST_ANSWER = 2  # trials (the enqueued baseline and one proposal) before the end's runs are kept time for


@dataclass
class Deadline:
    """``at``: the ``time.monotonic()`` by which the run ends (``seconds`` after it began);
    ``estimate_s``: a launch's length before any trial has ended; ``end_launches``: the
    fresh-server runs planned after the search, ``parallel`` at a time."""

    at: float
    seconds: float
    estimate_s: float
    end_launches: int = 0
    parallel: int = 1
    longest_s: float = field(default=0.0)

    @classmethod
    def starting(cls, began: float, seconds: float, estimate_s: float, end_launches: int, parallel: int) -> Deadline:
        at = began + seconds
        return cls(at=at, seconds=seconds, estimate_s=estimate_s, end_launches=end_launches, parallel=max(1, parallel))

    def observe(self, wall_s: float) -> None:
        """A trial (or a fresh-server run) took ``wall_s``: launches are judged at the longest seen."""
        self.longest_s = max(self.longest_s, wall_s)

    @property
    def launch_s(self) -> float:
        return self.longest_s or self.estimate_s

    def left(self, now: float | None = None) -> float:
        return self.at - (time.monotonic() if now is None else now)

    def end_s(self) -> float:
        """What the runs after the search take, ``parallel`` at a time."""
        return math.ceil(self.end_launches / self.parallel) * self.launch_s

    def room_for_trial(self, finished: int, now: float | None = None) -> bool:
        """Whether one more trial fits before the deadline, and the end's runs after it once the
        study has :data:`FIRST_ANSWER` finished trials: an answer first, its re-measurement after."""
        return self.left(now) >= self.launch_s + (self.end_s() if finished >= FIRST_ANSWER else 0.0)

    def trial_limit(self, finished: int, now: float | None = None) -> float:
        """The seconds a trial launched now may run: to the deadline, less the end's runs once the
        study has :data:`FIRST_ANSWER` trials (as :meth:`room_for_trial` counts them). A trial
        launched with room ends by it even where it outruns the longest seen (a slower machine,
        a longer plan)."""
        return max(0.0, self.left(now) - (self.end_s() if finished >= FIRST_ANSWER else 0.0))

    def room_for_reference(self, now: float | None = None) -> bool:
        """Whether the reference run before the search, the first answer's trials and the end's
        runs all fit: where they do not, the trials come first."""
        return self.left(now) >= (1 + FIRST_ANSWER) * self.launch_s + self.end_s()

    def launches_left(self, now: float | None = None) -> int:
        """How many fresh-server runs still fit, ``parallel`` at a time."""
        return max(0, math.floor(self.left(now) / self.launch_s)) * self.parallel

    def why_no_room(self) -> str:
        return (
            f"the deadline ({format_duration(self.seconds)}, budget.deadline) leaves no room for another trial: one takes "
            f"up to {format_duration(self.launch_s)} here, and {self.end_launches} fresh-server run(s) follow the search"
        )
