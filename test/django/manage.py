#!/usr/bin/env python3
"""Django's command-line utility for the pg_outbox migration test.

Run it with Debian's /usr/bin/python3 (python3-django, python3-psycopg2);
test/integration/django_migrate.sh drives it.
"""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "outbox_django.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
