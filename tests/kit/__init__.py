"""The shared test kit: builders of jobs, events and scheduler inputs, quantities, and the whole
scheduling loop in memory through the real codecs (`loop`). Tests import from here, never from a
`conftest.py`."""
