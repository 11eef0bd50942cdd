"""Minimal settings: one app, one PostgreSQL database, no password.

The connection comes from the environment: PGHOST (a host name or a socket
directory) and PGPORT as for psql, OUTBOX_DJANGO_DB (database name, default
"shop") and OUTBOX_DJANGO_USER (role, default "shop_app").  Authentication
is whatever the server does without a password (trust in the test cluster).
"""
import os

SECRET_KEY = "pg_outbox-django-migrate-test"  # not a secret: nothing is served
DEBUG = False
ALLOWED_HOSTS = []

INSTALLED_APPS = ["shop"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("OUTBOX_DJANGO_DB", "shop"),
        "USER": os.environ.get("OUTBOX_DJANGO_USER", "shop_app"),
        "HOST": os.environ.get("PGHOST", ""),
        "PORT": os.environ.get("PGPORT", ""),
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
