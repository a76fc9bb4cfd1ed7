# A stand-in for prom/prometheus, which no registry here serves: Debian's own prometheus
# package on the locally made debian:12-slim base (tests/integration/test_compose.py).
FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/*
USER prometheus
WORKDIR /var/lib/prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
