"""WSGI entry point: ``gunicorn shop.wsgi``. Loading the application runs the apps'
ready hooks, in each gunicorn worker process (no --preload): see orders/apps.py."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
application = get_wsgi_application()
