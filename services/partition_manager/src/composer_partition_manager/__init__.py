"""Composer partition-manager: monthly partitions created ahead, expired months dropped."""
