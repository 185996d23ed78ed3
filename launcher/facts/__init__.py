"""Facts: what a host really has, the ground floor the planner and preflight stand on.

``host`` (the gather script and its pure parsers: :class:`~launcher.facts.host.HostFacts`),
``cache`` (facts per host on the control node), ``gather`` (one SSH round per host, cached).
"""
