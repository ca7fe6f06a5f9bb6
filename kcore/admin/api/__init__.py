"""The ``/v1`` REST API, one module per resource, each a thin call into the Kafka APIs
(:mod:`kcore.admin.kafka`): build the Kafka request, ``await kafka(...)``, map the answer to
JSON in Kafka's vocabulary.

* :mod:`~kcore.admin.api.common` — the base models, the error body, shared look-ups;
* :mod:`~kcore.admin.api.cluster` — ``/v1/cluster``, ``/v1/brokers``;
* :mod:`~kcore.admin.api.topics` — ``/v1/topics``, ``/v1/topics/{topic}``;
* :mod:`~kcore.admin.api.configs` — ``/v1/topics/{topic}/configs``;
* :mod:`~kcore.admin.api.groups` — ``/v1/groups``, ``/v1/groups/{group}``;
* :mod:`~kcore.admin.api.resources` — the blueprint the app registers, holding these.
"""
