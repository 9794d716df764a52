"""Generated gRPC code for the worker protocol (proto/composer/v1/worker.proto).

Do not edit the v1/ files: change the .proto and run ``make proto``.
"""
