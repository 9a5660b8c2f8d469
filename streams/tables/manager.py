"""Faust's table manager without its start-up pause.

faust-streaming 0.15.3's `TableManager.on_start` sleeps one second before it registers the tables'
changelogs, so that tables declared late are still included; the worker's consumer subscribes only
after that. Flotilla declares every table while it builds the plane (`streams.plane.build_plane`),
before the worker starts, and a table added later is refused by Faust itself ("Too late to add
tables"), so the pause was a second of every worker's start: of a restore's spawn to first progress
(bench/restore.py, ~8 s, most of the rest Tansu's group join) and of every takeover.
"""

from __future__ import annotations

from faust.tables import TableManager


class PromptTableManager(TableManager):
    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()
