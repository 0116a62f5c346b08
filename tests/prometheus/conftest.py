from tests.prometheus.server import prometheus_server  # noqa: F401 - the real Prometheus
