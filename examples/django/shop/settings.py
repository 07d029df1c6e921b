"""The smallest Django project that runs the example: the ``orders`` app, and the outbox
app (``worker_sdk.outbox.django``) whose table lives in the project's SQLite database
(``SHOP_DATABASE``, default ``shop.db``; ``python manage.py migrate`` creates it)."""

import os

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["orders", "worker_sdk.outbox.django"]
ROOT_URLCONF = "shop.urls"
DATABASES: dict[str, object] = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("SHOP_DATABASE", "shop.db")}
}
USE_TZ = True
