"""The scheduling agent's pure core: the index it folds the scheduler feed into, and one cycle.

`streams.scheduler.algorithm` decides placements for a snapshot of jobs and nodes; this package keeps
that snapshot (jobs, executors, limiter state) from the feed, runs the lease lifecycle around
each decision (cancel and preempt requests, expired and returned leases, orphan runs) and turns
the result into the events and commands the agent publishes. Like `streams.scheduler.algorithm` it
imports nothing from Faust or aiokafka.
"""
