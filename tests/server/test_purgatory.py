"""The purgatory wakes waiters on their keys only, and forgets them afterwards."""

import trio
import trio.testing

from kcore.server.purgatory import Purgatory


def test_purgatory_notify_wakes_only_waiters_of_that_key():
    async def main():
        p = Purgatory()
        woken = []

        async def waiter(name, keys):
            woken.append((name, await p.wait(keys, timeout_s=10)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, "a", [("t", 0)])
            nursery.start_soon(waiter, "b", [("t", 1), ("u", 0)])
            await trio.testing.wait_all_tasks_blocked()
            assert p.watched == 3
            p.notify(("u", 0))
            await trio.testing.wait_all_tasks_blocked()
            assert woken == [("b", True)]
            p.notify(("t", 0))
        assert woken == [("b", True), ("a", True)]
        assert p.watched == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_purgatory_wait_times_out_and_unregisters():
    async def main():
        p = Purgatory()
        start = trio.current_time()
        assert await p.wait([("t", 0)], timeout_s=0.5) is False
        assert trio.current_time() - start >= 0.5
        assert p.watched == 0
        p.notify(("t", 0))  # nobody left: a no-op

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
