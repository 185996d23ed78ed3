"""Commands' flows as library code: what a command does with the hosts, composed from the layers
below (preflight, weights, deploy, rolling), with its output left to the caller (``cli/``)."""
