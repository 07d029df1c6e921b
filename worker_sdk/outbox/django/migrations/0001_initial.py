"""Creates the ``runwick_outbox`` table."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="OutboxRow",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job", models.BinaryField()),
                ("idempotency_key", models.CharField(max_length=300)),
                ("created_at_ms", models.BigIntegerField()),
                ("failed_at_ms", models.BigIntegerField(null=True)),
                ("error", models.TextField(null=True)),
            ],
            options={
                "db_table": "runwick_outbox",
                "indexes": [models.Index(fields=["failed_at_ms", "id"], name="ix_runwick_outbox_pending")],
            },
        ),
    ]
