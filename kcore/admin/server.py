"""The admin endpoint's Trio shell: Hypercorn serving the admin app on the broker's own loop.

Started by the broker as one more task of its nursery (not a thread, not a process): a route
calls the broker's services directly and never blocks the loop, so slow or many HTTP clients
cost the Kafka listeners no more than any other task would. Hypercorn bounds what one client
can hold: request heads (``h11_max_incomplete_size``), idle keep-alive connections, reads that
stall (``read_timeout``); the app bounds bodies. The server stops when the broker's nursery is
cancelled, and a graceful close of open HTTP connections is given at most
``SHUTDOWN_GRACE_S``: the admin endpoint never holds up a broker's shutdown.
"""

from __future__ import annotations

import logging
import ssl
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from kcore.admin.app import create_app
from kcore.admin.auth import TokenFile
from kcore.admin.client_certs import ClientCertHypercornConfig, ClientCertificates
from kcore.admin.cluster_view import PEERS_KEY
from kcore.security.principal_mapping import DEFAULT_RULES

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 1.0
VERIFY_MODES = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL}
READ_TIMEOUT_S = 30  # a client that sends nothing for this long is closed
# Hypercorn's idle timer also runs from accept to the first request: on a loaded node a burst
# of scrapers accepted at once could be closed unanswered (seen with 1,000 concurrent scrapes
# during the full suite) if it were short. Idle connections stay bounded by READ_TIMEOUT_S's
# order of magnitude either way.
KEEP_ALIVE_S = 20
BACKLOG = 1024  # a burst of scrapers waits in the kernel rather than being refused


def hypercorn_config(config: Any) -> HypercornConfig:
    hc = ClientCertHypercornConfig()
    secure = [x.bind for x in config.admin_listeners if x.scheme == "https"]
    plain = [x.bind for x in config.admin_listeners if x.scheme == "http"]
    if secure:
        hc.bind, hc.insecure_bind = secure, plain
        hc.certfile, hc.keyfile = config.admin_ssl_certfile, config.admin_ssl_keyfile
        if config.admin_ssl_client_auth != "none":
            hc.ca_certs = config.admin_ssl_truststore_location
            hc.verify_mode = VERIFY_MODES[config.admin_ssl_client_auth]
    else:
        hc.bind = plain
    hc.accesslog = None
    hc.errorlog = logging.getLogger("kcore.admin.hypercorn")
    hc.graceful_timeout = SHUTDOWN_GRACE_S
    hc.read_timeout = READ_TIMEOUT_S
    hc.keep_alive_timeout = KEEP_ALIVE_S
    hc.backlog = BACKLOG
    hc.include_server_header = False
    return hc


class AdminServer:
    """Serves ``admin.listeners`` for one broker; :meth:`run` reports the bound URLs."""

    def __init__(self, broker: Any) -> None:
        config = broker.config
        tokens = TokenFile(config.admin_auth_token_file) if config.admin_auth_token_file else None
        certificates = None
        if config.admin_ssl_client_auth != "none":
            rules = config.raw.get("ssl.principal.mapping.rules", DEFAULT_RULES)
            certificates = ClientCertificates(rules)
        self.app = create_app(
            broker,
            tokens=tokens,
            certificates=certificates,
            max_request_bytes=config.admin_max_request_bytes,
        )
        self.hypercorn = hypercorn_config(config)
        self.urls: list[str] = []

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.urls = await nursery.start(partial(serve, self.app, self.hypercorn))
                log.info("admin endpoint on %s", ", ".join(self.urls))
                task_status.started(self.urls)
        finally:
            await self.app.extensions[PEERS_KEY].aclose()
