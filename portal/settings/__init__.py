"""The portal's settings, one module per environment (DJANGO_SETTINGS_MODULE names one):

* ``portal.settings.production``: what manage.py, portal.wsgi and portal.celery load unless told
  otherwise, and what the image, docker-compose.yml and deploy/kubernetes name. A SECRET_KEY of
  its own is required; HTTPS only (redirect, HSTS, Secure cookies); API rate limits on.
* ``portal.settings.demo``: ``make run`` and ``make manage``. DEBUG, the built-in key, plain
  HTTP on 127.0.0.1.
* ``portal.settings.test``: the test suite (pyproject.toml's pytest section). Fast password
  hashing, an in-memory broker without Redis, no rate limits, static files by plain name.

``portal.settings.base`` holds what they share and is never loaded alone. All of them read the
same environment variables (core.env); none asks which program runs it.
"""
