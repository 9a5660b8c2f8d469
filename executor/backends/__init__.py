"""Backends: what runs a leased job (local processes, simulated runs, Kubernetes pods)."""
