"""``fleet watch``: a reconciler on the control host that keeps deployments alive (docs/watch.md)."""
