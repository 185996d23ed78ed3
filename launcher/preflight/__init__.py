"""Preflight: host facts, the checks run before a launch, and the evidence bundle after one.

``facts`` (gather script + pure parsers; the planner reads its :class:`~launcher.preflight.facts.HostFacts`),
``facts_cache`` (facts kept per host on the control node), ``checks`` (pure verdicts from facts and
probe results), ``run`` (gathers, probes and judges over SSH), ``collect`` (``fleet collect``'s
bundle).  Kept import-free: the pure planner imports ``facts`` through this package.
"""
