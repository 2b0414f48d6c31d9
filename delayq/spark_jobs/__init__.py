"""PySpark audits of delays and dead-lettering, read from the event trail (docs/audits.md).

- ``store``: where the store is (a configuration file or a driver URI) and opening it;
- ``source``: the ``delayq`` Python Data Source, ``spark.read.format("delayq")``;
- ``trail``: the trail grouped per message, and the stays derived from it, shared by both
  audits;
- ``stats``: exact percentile summaries and their rounding;
- ``bodies``: the dotted keys and scalar values of message bodies;
- ``delay_audit`` and ``dead_letter_audit``: the two audits, one row per queue;
- ``scope``: what an audit covers; ``job``: one run, from the plan to the rows;
- ``output``: audit.json and the Parquet files; ``report``: the HTML report, drawn with
  ``charts``;
- ``progress``: what the CLI prints on stderr; ``cli``: ``delayq-audit``.

Only this package imports pyspark (the ``spark`` extra); the service never imports it.
"""
