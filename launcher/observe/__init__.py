"""Observability, below the deploy layer (it imports no deploy code): scrape targets for every
unit's metrics endpoint (``targets``, ``sdfile``), the engines' and routers' metric names
(``names``), reading load from ``/metrics`` (``load``, ``fetch``).  Publishing a deployment's
targets and ``fleet top``'s rows read the hosts as ``fleet status`` does: ``deploy/publish.py``,
``deploy/top.py``."""
