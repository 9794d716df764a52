"""Composer coordinator: the gRPC service workers lease tasks from and report to."""
