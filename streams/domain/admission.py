"""Admission of submissions: a producer that floods the submissions topic cannot starve the others.

Two limits apply to every message before its jobs are judged: its size, and the rate of jobs per
queue and per user. A rate limit is a token bucket of jobs: ``rate`` jobs a second refill it up to
``burst``. A request whose jobs do not fit both its queue's and its user's bucket is refused whole,
with a reason, and takes no tokens, so the same request retried later can pass.

Time is the log's: the submissions' message timestamps, never the worker's clock, so that
processing the same messages again after a crash decides the same way; a timestamp earlier than
one already seen refills nothing. Buckets live in the ingest agent's memory and start full when
a worker starts. Submissions are keyed by queue, so one worker sees every request of a queue and
its queue limit is exact; a user submitting to queues on several partitions may get the user
limit once per worker that owns one of them.

These are not the scheduler's rate limits (``streams.scheduler.algorithm.limits``), which are
frozen at a cycle's time and persisted between cycles; these refill at every request.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SubmissionLimits:
    """Jobs per second and burst (jobs) per queue and per user, and the largest message, in bytes.

    A rate of 0 turns that limit off, as does a size of 0; the default is no limit at all (the
    worker's settings give the production defaults, ``streams.config.Settings``)."""

    queue_rate: float = 0.0
    queue_burst: int = 0
    user_rate: float = 0.0
    user_burst: int = 0
    max_message_bytes: int = 0

    def __post_init__(self) -> None:
        for kind in ("queue", "user"):
            rate, burst = getattr(self, f"{kind}_rate"), getattr(self, f"{kind}_burst")
            if rate < 0 or (rate > 0 and burst < 1):
                raise ValueError(f"submission {kind} limit: rate {rate} must be >= 0 and its burst ({burst}) >= 1 when it is set")
        if self.max_message_bytes < 0:
            raise ValueError(f"maximum submission size {self.max_message_bytes} is negative")

    def oversized(self, size: int) -> str | None:
        """Why a message of ``size`` bytes is refused unread, or None."""
        if self.max_message_bytes and size > self.max_message_bytes:
            return f"submission of {size} bytes is over the limit of {self.max_message_bytes} bytes; split it into smaller requests"
        return None


@dataclass
class _Bucket:
    tokens: float
    at_ms: int


# Buckets kept at most; beyond, the full ones (which say nothing a missing bucket would not) are dropped.
MAX_BUCKETS = 10_000


@dataclass
class Admission:
    """The buckets of one ingest agent, and its decisions. Pure: time comes with each request."""

    limits: SubmissionLimits = field(default_factory=SubmissionLimits)
    _queues: dict[str, _Bucket] = field(default_factory=dict, repr=False)
    _users: dict[str, _Bucket] = field(default_factory=dict, repr=False)
    _now_ms: int = 0

    def admit(self, queue: str, user: str, jobs: int, at_ms: int) -> str | None:
        """Take ``jobs`` tokens from the queue's and the user's buckets at log time ``at_ms``; or, if
        either has too few, take none and say why."""
        self._now_ms = max(self._now_ms, at_ms)
        limits = self.limits
        checks = [
            (self._queues, queue, limits.queue_rate, limits.queue_burst, f"queue {queue!r}"),
            (self._users, user, limits.user_rate, limits.user_burst, f"user {user!r}"),
        ]
        buckets = []
        for found, key, rate, burst, who in checks:
            if not rate:
                continue
            bucket = self._refilled(found, key, rate, burst)
            if jobs > burst:
                return f"{jobs} jobs in one request are more than {who} may submit at once ({burst}); split the request"
            if jobs > bucket.tokens:
                return (
                    f"{who} is over its submission limit of {rate:g} jobs/s (bursts of {burst}): {jobs} jobs submitted, "
                    f"{int(bucket.tokens)} admissible now; retry later"
                )
            buckets.append(bucket)
        for bucket in buckets:
            bucket.tokens -= jobs
        return None

    def _refilled(self, found: dict[str, _Bucket], key: str, rate: float, burst: int) -> _Bucket:
        bucket = found.get(key)
        if bucket is None:
            if len(found) >= MAX_BUCKETS:
                self._forget_full(found, rate, burst)
            bucket = found[key] = _Bucket(float(burst), self._now_ms)
        else:
            bucket.tokens = min(float(burst), bucket.tokens + (self._now_ms - bucket.at_ms) / 1000 * rate)
            bucket.at_ms = self._now_ms
        return bucket

    def _forget_full(self, found: dict[str, _Bucket], rate: float, burst: int) -> None:
        for key, bucket in list(found.items()):
            if bucket.tokens + (self._now_ms - bucket.at_ms) / 1000 * rate >= burst:
                del found[key]
