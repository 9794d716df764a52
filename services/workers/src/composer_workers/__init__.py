"""Composer built-in workers: HTTP and PYTHON nodes, run on the worker SDK."""
