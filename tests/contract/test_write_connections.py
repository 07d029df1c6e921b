"""The store keeps a few write connections open between transactions (``Store._writer``):
they never starve the pool however many threads write, a closed store leaves no session
behind, and a kept connection that died is replaced without failing a transaction."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from coordinator.store import Store, Tx
from coordinator.store.store import KEPT_WRITERS

from .harness import count_sessions, end_sessions


def _queue_count(tx: Tx) -> int:
    return len(tx.queue_controls(["default"]))


def test_more_threads_than_connections_kept_all_write_round_after_round(store: Store) -> None:
    """Three rounds of twice as many transactions open at once as the store keeps (on
    SQLite, one after the other: one writer): each round gets its connections, none
    waits for the pool's timeout."""
    threads_per_round = 2 * KEPT_WRITERS
    errors: list[BaseException] = []
    done: list[int] = []

    def write(barrier: threading.Barrier) -> None:
        def body(tx: Tx) -> int:
            barrier.wait(timeout=20)  # every transaction of the round is open together
            return _queue_count(tx)

        try:
            done.append(store.transact(body, what="a test write"))
        except BaseException as error:  # reported below, with the thread's own traceback lost
            errors.append(error)

    for _ in range(3):
        barrier = threading.Barrier(threads_per_round if store.postgres else 1)
        threads = [threading.Thread(target=write, args=(barrier,)) for _ in range(threads_per_round)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    assert errors == []
    assert len(done) == 3 * threads_per_round


@pytest.fixture
def named_store(postgres_url: str) -> Iterator[tuple[Store, str]]:
    name = f"runwick-writers-{uuid.uuid4().hex[:8]}"
    url = make_url(postgres_url).update_query_dict({"application_name": name})
    store = Store.open(url.render_as_string(hide_password=False))
    try:
        yield store, name
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_a_closed_store_leaves_no_session_open(
    postgres_url: str, named_store: tuple[Store, str]
) -> None:
    store, name = named_store
    for _ in range(3):
        store.transact(_queue_count, what="a test write")
    assert count_sessions(postgres_url, name) >= 1  # kept for the next transaction

    store.close()

    assert count_sessions(postgres_url, name) == 0


@pytest.mark.postgres
def test_postgres_a_kept_connection_whose_backend_died_is_replaced(
    postgres_url: str, named_store: tuple[Store, str]
) -> None:
    store, name = named_store
    store.transact(_queue_count, what="a test write")
    assert end_sessions(postgres_url, name) == 1

    tries: list[int] = []

    def body(tx: Tx) -> int:
        tries.append(1)
        return _queue_count(tx)

    store.transact(body, what="a test write")  # the kept connection is dead: tried again on a new one

    assert len(tries) == 2
    store.transact(body, what="a test write")  # and the new one is kept
    assert len(tries) == 3
