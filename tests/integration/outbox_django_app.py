"""A Django process that writes into the outbox: ``python -m
tests.integration.outbox_django_app APP_DB_URL``. It migrates the ``worker_sdk.outbox.django``
app, checks the migration matches the model, then commits two jobs, rolls one back, and
has one refused; it prints the committed jobs' idempotency keys, one per line."""

from __future__ import annotations

import sys

import django
from django.conf import settings
from sqlalchemy.engine import make_url


def database_settings(url: str) -> dict[str, object]:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.database,
        "USER": parsed.username,
        "HOST": parsed.host,
        "PORT": parsed.port,
    }


def main(url: str) -> None:
    settings.configure(
        DATABASES={"default": database_settings(url)},
        INSTALLED_APPS=["worker_sdk.outbox.django"],
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    from tests.integration.outbox_app import Capture
    from worker_sdk import ArgumentError
    from worker_sdk.outbox.django import outbox

    call_command("migrate", "runwick_outbox", verbosity=0)
    call_command("makemigrations", "runwick_outbox", "--check", "--dry-run", verbosity=0)
    with transaction.atomic():
        keys = [outbox.enqueue(Capture("django-1")), outbox.enqueue(Capture("django-2"), queue="payments")]
    try:
        with transaction.atomic():
            outbox.enqueue(Capture("rolled-back"))
            raise RuntimeError("the order failed")
    except RuntimeError:
        pass
    try:
        outbox.enqueue(Capture("x"), queue="not/a/name")
    except ArgumentError as exc:
        print(f"refused: {exc}", file=sys.stderr)
    print("\n".join(keys))


if __name__ == "__main__":
    main(sys.argv[1])
