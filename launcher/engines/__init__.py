"""Engine argv builders and the engines' recorded option snapshots (argcheck)."""
