"""Armada's gRPC API (Submit, QueueService, Jobs and Event), served by the worker on the Faust event loop."""
