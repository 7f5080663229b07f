# PolyTrace: the dashboard and REST API in one container (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 --user-group polytrace \
    && mkdir /data \
    && chown polytrace:polytrace /data

WORKDIR /src
# Only what pyproject.toml packages: the image never carries tests, traces or databases.
COPY pyproject.toml README.md ./
COPY polytrace ./polytrace
COPY store ./store
COPY ingest ./ingest
COPY queries ./queries
COPY server ./server
COPY frontend ./frontend
COPY workload ./workload
RUN pip install . && rm -rf /src

WORKDIR /data
# One process owns the DuckDB file, which lives on the volume. Binding 0.0.0.0 makes the
# port reachable from outside the container, so set POLYTRACE_TOKEN for writes.
ENV POLYTRACE_DB=/data/polytrace.duckdb \
    POLYTRACE_HOST=0.0.0.0 \
    POLYTRACE_PORT=8000
VOLUME ["/data"]
USER polytrace
EXPOSE 8000
# slim has no curl: probe /api/health with the Python that runs the server
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('POLYTRACE_PORT', '8000') + '/api/health', timeout=4)"]
CMD ["polytrace", "serve"]
