"""
pg-status: a sidecar that polls PostgreSQL hosts and tells applications
which one is the master, which replica to read from and how far each
replica lags behind.
"""

__version__ = "0.2.0"
