"""Reading kcore's files for people: the pure half of ``kcore dump-log`` and the console
consumer's formatters.

* :mod:`kcore.inspect.decoders` renders one record of ``__consumer_offsets``,
  ``__transaction_state``, ``__cluster_metadata`` or ``__mirror_state`` as Kafka's tools print
  it (``kafka-dump-log.sh``'s decoders and ``kafka-console-consumer.sh``'s formatters);
* :mod:`kcore.inspect.segment_dump` renders a segment's batches and records as
  ``kafka-dump-log.sh`` lines (or JSON objects) and reports where a damaged file stops parsing;
* :mod:`kcore.inspect.file_dumps` renders the other files of a log directory (indexes,
  producer snapshots, checkpoints) and says which kind a file name is.

Nothing here opens a file: the callers (``kcore/commands/dump_log.py``) read the bytes, read-only,
and pass them in. Every format is parsed by the module that owns it (``kcore.record``,
``kcore.log``, ``kcore.metadata.records``, the coordinators' and the mirror's ``records``);
this package only lays out what they return.
"""
