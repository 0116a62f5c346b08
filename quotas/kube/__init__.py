"""The cluster side, pure: specs in (``spec``), Kubernetes objects out (``compiler``),
checked as the API server would (``validate``), written by the applier (``applier``) through
a backend. No Django and no app here (an import-linter contract); ``quotas.loader`` builds
the specs from the database."""
