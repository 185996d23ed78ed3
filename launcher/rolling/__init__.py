"""Rolling restarts and rollback: batches of restart groups taken out of the router, drained,
restarted through the deploy layer, gated on health and put back (see docs/rolling.md)."""
