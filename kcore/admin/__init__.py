"""kcore's HTTP admin endpoint: a REST API for mirrors and the cluster, Prometheus metrics,
health checks and a dashboard, served by Hypercorn on the broker's own Trio loop.

* :mod:`kcore.admin.config` — ``admin.listeners`` and its startup rules;
* :mod:`kcore.admin.server` — the Trio shell (Hypercorn);
* :mod:`kcore.admin.app` — the Quart-Trio app: auth, errors, the OpenAPI document;
* :mod:`kcore.admin.kafka` — how a route performs a Kafka operation (through the broker's own
  handlers, as the caller's principal);
* :mod:`kcore.admin.context` — what a route reaches: the broker, the principal;
* :mod:`kcore.admin.health` — ``/health/live`` and ``/health/ready``;
* :mod:`kcore.admin.mirrors` — ``/v1/mirrors``: the cluster mirror Kafka APIs over HTTP;
* :mod:`kcore.admin.operations` — the long operations answered 202 (in memory, bounded);
* :mod:`kcore.admin.dashboard` — the dashboard at ``/`` (its files: ``kcore/admin/ui/``).

The configuration imports only :mod:`kcore.admin.config`; the web stack comes with the broker.
"""
