"""A submission over the size limit is refused by the API at once (413), before it reaches the log."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from streams.api.errors import ApiError
from streams.api.grpc.errors import status_of
from streams.api.operations import Operations
from streams.auth import Permissions
from streams.auth.principal import ANONYMOUS
from streams.domain.admission import SubmissionLimits
from streams.domain.ids import IdFactory
from streams.domain.jobspec import job_item
from streams.replies import Replies
from tests.kit.jobs import QUEUE, item


def test_a_submission_over_the_size_limit_is_refused_before_the_log() -> None:
    queues: Any = {"team-a": QUEUE}
    # None for the parts a refused submission must not reach: using any of them would fail, so the refusal must come first
    ops = Operations(
        queues=queues,
        permissions=Permissions(),
        topics=None,  # type: ignore[arg-type]  # on purpose, see above
        replies=Replies(),
        ids=IdFactory.system(),
        reads=None,  # type: ignore[arg-type]  # on purpose, see above
        submission_limits=SubmissionLimits(max_message_bytes=2_000),
    )
    items = [job_item(item()) for _ in range(50)]
    with pytest.raises(ApiError) as refused:
        asyncio.run(ops.submit(ANONYMOUS, "team-a", "set-1", items))
    assert refused.value.status == 413
    assert refused.value.reason.startswith("submission of ") and "over the limit of 2000 bytes" in refused.value.reason
    assert status_of(refused.value)[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
