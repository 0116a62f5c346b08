"""portal: the Django project, the top floor. Settings, the root URL conf (``urls``, the API
routes in ``api/urls``, the pages in ``pages``), the Celery app (``celery``: wiring and the
one beat schedule), the filesystem broker of the embedded default (``brokers``), middleware,
and the pages that combine apps (home, a tenant, the admin console) with the demo command.

Nothing below imports it: apps reach the Celery app through ``celery.current_app`` or
``shared_task``, and the shared plumbing is in ``core``.
"""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
