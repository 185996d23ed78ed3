"""Preflight: the checks run before a launch, and the evidence bundle after one.

``checks`` (pure verdicts from facts and probe results), ``run`` (probes and judges over SSH,
after a facts round: :mod:`launcher.facts`), ``collect`` (``fleet collect``'s bundle).
"""
