# One image for web, worker and beat.

# The documentation site (MkDocs), which the portal serves under /help/: built in a stage of its
# own, so its tools never enter the image; only the built site/ is copied.
FROM python:3.11-slim AS docs
WORKDIR /src
COPY requirements-docs.lock ./
RUN pip install --no-cache-dir -r requirements-docs.lock
COPY . .
RUN NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet

FROM python:3.11-slim
# The production settings (portal/settings/production.py), whatever runs in the image.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DATA_DIR=/data STATIC_ROOT=/app/staticfiles \
    DJANGO_SETTINGS_MODULE=portal.settings.production
WORKDIR /app
COPY requirements.lock requirements-ldap.lock pyproject.toml ./
# The runtime pins only (requirements.lock; the development tools of requirements-dev.lock never
# enter the image) and LDAP's. python-ldap compiles against OpenLDAP's and Cyrus SASL's headers.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libldap2-dev libsasl2-dev \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir -r requirements.lock -r requirements-ldap.lock
COPY . .
# The MIG rules and report schema the portal shares with the node agent (their dependencies
# are pinned in requirements.lock); the node agent itself is not installed here.
RUN pip install --no-cache-dir --no-deps ./gpu_spec
COPY --from=docs /src/site ./site
# collectstatic needs settings but no database or secret; the build-time key is thrown away.
RUN SECRET_KEY=build-only-not-used-at-runtime python manage.py collectstatic --noinput \
    && groupadd --system --gid 10001 portal \
    && useradd --system --uid 10001 --gid 10001 --home /app portal \
    && mkdir -p /data && chown portal /data
# Numeric, so that Kubernetes can check runAsNonRoot (deploy/kubernetes runs it as 10001).
USER 10001:10001
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000", "--workers", "4", "--worker-class", "gthread", "--threads", "4", "--keep-alive", "75"]
