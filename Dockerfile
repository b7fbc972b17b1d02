# syntax=docker/dockerfile:1
# streamtx: one image for every service; `streamtx serve <service>` picks one.
#
#   docker build -t streamtx .
#   docker run -e STREAMTX_LEDGER_URL=kafka://kafka:9092 streamtx broker
#
# Settings are STREAMTX_* environment variables only (see each service's
# settings.py and README "Deploy"). tests/deploy/test_package.py runs this
# file's commands: it builds the wheel, installs it outside the repo, starts
# ENTRYPOINT + CMD with these ENV values and runs the HEALTHCHECK command.

# --- build: the wheel of streamtx and of every dependency -------------------
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shared/ shared/
COPY services/ services/
COPY spark-jobs/ spark-jobs/
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[spark]"

# --- runtime: no compiler, no pip cache, no source tree ----------------------
FROM python:3.11-slim AS runtime
RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/streamtx streamtx
# The wheels are mounted, not copied: no layer of the image keeps them.
RUN --mount=type=bind,from=build,source=/wheels,target=/tmp/wheels \
    pip install --no-cache-dir --no-index --find-links /tmp/wheels streamtx
ENV STREAMTX_HOST=0.0.0.0 \
    STREAMTX_PORT=8080 \
    STREAMTX_LEDGER_URL=file:///var/lib/streamtx/ledgers \
    PYTHONUNBUFFERED=1
USER 10001
WORKDIR /var/lib/streamtx
VOLUME ["/var/lib/streamtx"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["streamtx", "probe", "healthz"]
ENTRYPOINT ["streamtx", "serve"]
CMD ["broker"]

# --- spark: the runtime plus a Java runtime and the [spark] extra (PySpark,
# pyarrow, ...), for `streamtx jobs` (compose profile "spark"); built only
# when asked for (--target spark).
FROM runtime AS spark
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build,source=/wheels,target=/tmp/wheels \
    pip install --no-cache-dir --no-index --find-links /tmp/wheels "streamtx[spark]"
USER 10001
ENTRYPOINT ["streamtx", "jobs"]
CMD ["histograms", "--help"]

# --- the default target: the runtime image.
FROM runtime
