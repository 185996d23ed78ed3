"""Observability: scrape targets for every unit's metrics endpoint (``targets``, ``sdfile``,
``publish``), the engines' and routers' metric names (``names``), reading load from ``/metrics``
(``load``, ``fetch``) and ``fleet top``'s rows (``top``)."""
