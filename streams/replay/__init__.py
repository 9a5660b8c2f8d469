"""Reading the log back: the shared reader of every replay command.

`flotilla audit`, `explain`, `what-if`, the `--at` reads and `flotilla rebuild` all ask the same
questions of the log, of a running broker or of an archive directory alike, and answer them with
the same pure functions the worker runs:

- `source`: the log as a `LogSource` (`ArchiveLog` for ``--from-archive DIR``; `broker.BrokerLog`
  for a running broker): the records of a topic's partitions from an offset or a time, all of them
  in time order, the event sequences decoded, and the scheduler feed's generations (a restore of
  the embedded broker starts a new feed; the archive keeps the earlier ones);
- `cycles`: every recorded cycle repeated: the feed folded into a fresh index, a cycle run at each
  tick with the configuration the feed says decided it (`Configurations`), each repeated outcome
  yielded beside the outcome the scheduler committed;
- `jobs`: `events` folded into job states up to a time, with the job-state agent's own fold
  (`streams.scheduler.fold`), in memory or into a RocksDB directory;
- `headers`: the few fields of an event sequence a replay needs without decoding it whole;
- `diff`: where two decoded records differ, field by field.

Everything here but `broker` imports no broker library, so the replays are tested without one.
"""
