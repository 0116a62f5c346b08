"""The WSGI application gunicorn serves (``gunicorn portal.wsgi``), made ready before the first
request.

gunicorn imports this module in each worker before the worker takes connections. Django would
import the URLconf (every view, serializer and schema module behind it: 180 ms of a core) at the
first request, and every request arriving meanwhile waited too: the first people to open the
login page after a start waited 0.5 s under load (bench/README.md, the load test). So it is
imported here, and what the process holds then (modules, classes, settings, URL patterns) is
moved out of the garbage collector's sight: ``gc.freeze`` keeps full collections from walking
the same long-lived objects again on every pass.
"""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import reverse

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.production")
application = get_wsgi_application()
reverse("login")  # the URLconf imported and its reverse lookup built
gc.freeze()
