"""The smallest Django project that runs the example: one app (``orders``), no database."""

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["orders"]
ROOT_URLCONF = "shop.urls"
DATABASES: dict[str, object] = {}
USE_TZ = True
