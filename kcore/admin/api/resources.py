"""The ``/v1`` resources of the cluster, brokers, topics, configs and groups, as one blueprint
for the app to register."""

from __future__ import annotations

from quart import Blueprint

from kcore.admin.api.cluster import cluster
from kcore.admin.api.configs import configs
from kcore.admin.api.groups import groups
from kcore.admin.api.topics import topics

resources = Blueprint("resources", __name__)
for _blueprint in (cluster, configs, groups, topics):
    resources.register_blueprint(_blueprint)
