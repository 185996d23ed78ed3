"""``fleet bench``: a deployment's public endpoint measured with a maintained benchmark client
(aiperf), reported in the catalog's terms (goodput within an SLO, normalised per 8 GPUs) beside
the recipe's figures, kept and compared.  What a run asks for (shapes, SLO, sweep: pure) is
``launcher.config.benchspec``, which the playbook loader reads too.  Modules: ``client`` (the
client's argv and run), ``results`` (its export -> the report model), ``report`` (markdown
table, PNG plot), ``store`` (saved runs, compare), ``run`` (one sweep against a deployment).
See docs/bench.md."""
