"""Running a wire test on a fresh embedded broker."""

from __future__ import annotations

from collections.abc import Mapping

import trio

from kcore.client.cluster import KafkaClient
from kcore.testing import EmbeddedCluster


def with_broker(config: Mapping[str, str]):
    """Decorator: run the async ``test(cluster, client)`` under Trio on a fresh broker with
    ``config``, the client's metadata loaded."""

    def wrap(test):
        def run():
            async def main():
                async with (
                    EmbeddedCluster(config=config) as cluster,
                    KafkaClient([cluster.bootstrap_servers]) as client,
                ):
                    await client.refresh_metadata()
                    await test(cluster, client)

            trio.run(main)

        run.__name__ = test.__name__  # pytest must not see the wrapped test's parameters
        return run

    return wrap
