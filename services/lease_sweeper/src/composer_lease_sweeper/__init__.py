"""Composer lease-sweeper: nothing is ever stuck (expired leases, lost dispatches,
stream entries on dead workers, tasks delivered too often)."""
