"""The chaos suite (``make chaos``; a short variant runs in ``make test``).

It starts a private PostgreSQL and Redis, the real services on them as
processes (replicated where the issue asks), drives runs of mixed shapes
through the REST API while it kills, freezes and restarts pieces, then waits
for quiescence and checks the engine's promises against an independent
ledger that the workers' no-op handlers write. See ``suite.py``.
"""
