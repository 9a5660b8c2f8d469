"""Replay of the acceptance scenarios (Armada's scheduler test cases) through the scheduler."""
