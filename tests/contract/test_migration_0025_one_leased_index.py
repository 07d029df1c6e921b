"""Migration 0025 (one index of leased jobs by queue, key and state instead of two): the
upgrade replaces both, the downgrade restores them as they were; on both engines."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine, inspect

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, upgrade

from .migrations import upgrade_to_head_matching_the_models


def _leased_indexes(engine: Engine) -> dict[str, list[str]]:
    return {
        index["name"]: list(index["column_names"])
        for index in inspect(engine).get_indexes("jobs")
        if index["name"] in ("ix_jobs_queue_leased", "ix_jobs_queue_key_leased")
    }


def test_0025_merges_the_leased_indexes_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0024_queue_rates")
        before = _leased_indexes(engine)
        assert before == {
            "ix_jobs_queue_leased": ["queue", "state"],
            "ix_jobs_queue_key_leased": ["queue", "concurrency_key"],
        }

        upgrade(engine, "0025_one_leased_index")
        assert _leased_indexes(engine) == {"ix_jobs_queue_key_leased": ["queue", "concurrency_key", "state"]}

        command.downgrade(_config(engine), "0024_queue_rates")
        assert _leased_indexes(engine) == before
        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
