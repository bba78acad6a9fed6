# The gateway image: docker build -t hybrid-gateway .   (deploy/docker-compose.yml builds it)
#
# Run it with a config mounted at /etc/hybrid-gateway/gateway.yaml (deploy/gateway.yaml is one):
#   docker run -p 8080:8080 -v "$PWD/deploy/gateway.yaml:/etc/hybrid-gateway/gateway.yaml:ro" \
#     -v gateway-var:/var/lib/hybrid-gateway hybrid-gateway
# The config's server.port must stay 8080 (EXPOSE and HEALTHCHECK use it) and its request log
# belongs under /var/lib/hybrid-gateway, the volume.  CMD is in exec form, so `serve` is PID 1
# and gets the SIGTERM of `docker stop` itself: /readyz turns 503, in-flight requests finish
# within --grace-s, the request log is flushed (docs/scale-out.md).  Give the container a stop
# timeout longer than the grace period (compose: stop_grace_period).

# -- build: install the package and its runtime extras into a virtual environment -------------
FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# redis + postgres: the shared-state backends of deploy/gateway.yaml (stores.backend, records).
RUN /opt/venv/bin/pip install --no-cache-dir ".[redis,postgres]"

# -- runtime: the virtual environment only, run as an unprivileged user ------------------------
FROM python:3.11-slim-bookworm
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    OPENBLAS_NUM_THREADS=1
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /var/lib/hybrid-gateway gateway \
    && mkdir -p /var/lib/hybrid-gateway /etc/hybrid-gateway \
    && chown gateway:gateway /var/lib/hybrid-gateway
COPY --from=build /opt/venv /opt/venv
# The request-log journal (server.request_log.path) and any sqlite files the config names.
VOLUME ["/var/lib/hybrid-gateway"]
WORKDIR /var/lib/hybrid-gateway
USER 10001:10001
EXPOSE 8080
# 503 until the gateway can serve and again while it drains; urllib raises on any non-2xx.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=2)"]
STOPSIGNAL SIGTERM
CMD ["hybrid-gateway", "serve", "--config", "/etc/hybrid-gateway/gateway.yaml", "--host", "0.0.0.0", "--port", "8080", "--grace-s", "20"]
