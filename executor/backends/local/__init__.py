"""The local backend, the embedded default: a run is a supervised subprocess on this machine."""
