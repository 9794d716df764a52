"""Composer outbox-enqueuer: committed dispatches to Redis Streams, and run webhooks."""
