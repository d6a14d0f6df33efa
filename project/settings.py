"""Settings of the durablebeat demo project.

Embedded by default (SQLite and kombu's filesystem broker under ./var, nothing to install);
``DATABASE_URL`` and ``CELERY_BROKER_URL`` switch to PostgreSQL and Redis (see docker/).
"""

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import django
from celery.schedules import crontab

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DURABLEBEAT_VAR_DIR", BASE_DIR / "var"))

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "insecure-demo-key-change-me")
# Off unless asked for (scripts/demo.sh does): a debug page shows settings and tracebacks
# to anyone who can reach a URL, e.g. an anonymous metrics request (R21).
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_results",
    "durablebeat",
    "project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "project.wsgi.application"

_SQLITE_OPTIONS = {
    # Beat, the worker and the admin write at once: WAL lets readers go on, IMMEDIATE
    # transactions queue writers instead of failing with "database is locked".
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
}


def database_from_env(default_url: str) -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL", default_url)
    config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    if config["ENGINE"] == "django.db.backends.sqlite3":
        options = _SQLITE_OPTIONS if django.VERSION >= (5, 1) else {"timeout": 30}  # 5.1 added them
        config["OPTIONS"] = {**options, **config.get("OPTIONS", {})}
    elif config["ENGINE"] == "django.db.backends.mysql":  # MariaDB or MySQL
        config["OPTIONS"] = {"charset": "utf8mb4", **config.get("OPTIONS", {})}
    return config


VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {"default": database_from_env(f"sqlite:///{VAR_DIR / 'demo.sqlite3'}")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# --- Celery -----------------------------------------------------------------------------
_BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "queue"),
        "data_folder_out": str(_BROKER_DIR / "queue"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        # kombu's default is ./control, i.e. wherever the process was started.
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_TRACK_STARTED = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "durablebeat.schedulers:DurableScheduler"

CELERY_BEAT_SCHEDULE = {
    # Housekeeping: the daily job of the restart-starvation story. Its first fire is one
    # startup grace after the first boot, then every 24 h on that grid, however often
    # beat restarts.
    "cleanup-expired-sessions": {
        "task": "project.demo.tasks.cleanup_expired_sessions",
        "schedule": timedelta(hours=24),
    },
    # Housekeeping, frequent: re-fetches something every 15 s.
    "refresh-exchange-rates": {
        "task": "project.demo.tasks.refresh_exchange_rates",
        "schedule": timedelta(seconds=15),
        "options": {"durablebeat": {"startup_grace": 5}},
    },
    # Delivery: a user-facing digest on a crontab. Every minute here so the demo shows it;
    # a real one would be crontab(hour=8, minute=0). catch_up: a slot lost to a restart is
    # sent once, late (R8).
    "send-digest": {
        "task": "project.demo.tasks.send_digest",
        "schedule": crontab(minute="*"),
        "options": {"durablebeat": {"catch_up": True}},
    },
}

# durablebeat logs one event per line ("fire schedule=... slot=... reason=..."); under
# celery they go through celery's own handler, elsewhere through Django's console handler.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"durablebeat": {"level": "INFO"}},
}
