# tpserve container images. Two targets, one binary (`tpserve serve|coordinator|worker`):
#
#   docker build --target cpu  -t tpserve:cpu  .   # Debian 12, CPU kernels + Gloo
#   docker build --target cuda -t tpserve:cuda .   # Ubuntu 24.04 + CUDA 13 (the default target)
#
# The model is never baked in: mount it read-only at /models, at the same path in every
# container of a deployment (the coordinator reads it for the tokenizer and tells each worker
# the same path). Ports: 50051 public gRPC API, 9090 coordinator metrics, 7001 worker gRPC,
# 9091 worker metrics. deploy/check_dockerfile.py lints this file (tests/integration/test_deploy.py).
#
# Runtime libraries: each build stage runs deploy/runtime-packages.sh, which maps every
# shared library the built binary loads (ldd) to the package that owns it (dpkg -S); the
# runtime stage installs exactly that list. So the runtime images get runtime packages only
# (no -dev), under the names of their own distribution (Debian 12: libgrpc++1.51,
# libprotobuf32; Ubuntu 24.04: libgrpc++1.51t64, libprotobuf32t64, ...), without a second,
# hand-kept list that could drift from what the binary links.
#
# Stage order matters: the CPU stages come first so that `--target cpu` never touches the
# CUDA images (the classic builder builds every stage up to the target), and the CUDA
# runtime stage is last, so a plain `docker build .` gives the CUDA image.

ARG DEBIAN_VERSION=12
ARG CUDA_VERSION=13.0.0
ARG CUDA_UBUNTU=ubuntu24.04

# ---------------------------------------------------------------------------------------------
# CPU build: Debian 12, the distribution the project is developed and tested on.
FROM debian:${DEBIAN_VERSION} AS build-cpu
ARG DEBIAN_FRONTEND=noninteractive
# The same -dev packages as scripts/install-deps.sh, less the lint and test tools (GoogleTest
# and Google Benchmark stay: CMake finds them unconditionally).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev prometheus-cpp-dev libgloo-dev nlohmann-json3-dev libgoogle-glog-dev \
      libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libboost-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# What the build reads, and no more: an edit to the docs, tests or benchmarks keeps the
# compiled layer cached.
COPY CMakeLists.txt ./
COPY cmake cmake
COPY proto proto
COPY kernels kernels
COPY server server
COPY clients/cpp clients/cpp
COPY tests/tools tests/tools
COPY deploy/healthcheck.py deploy/runtime-packages.sh deploy/
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPSERVE_DEBUG_INFO=none -DTPSERVE_CUDA=OFF \
      -DTPSERVE_TESTS=OFF -DTPSERVE_BENCH=OFF \
 && cmake --build /build --target tpserve -j"$(nproc)" \
 && install -D -m 0755 -s /build/server/tpserve /out/tpserve \
 && install -D -m 0755 deploy/healthcheck.py /out/tpserve-healthcheck \
 && bash deploy/runtime-packages.sh /out/tpserve > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

# ---------------------------------------------------------------------------------------------
# CPU runtime: `docker build --target cpu .`
FROM debian:${DEBIAN_VERSION}-slim AS cpu
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build-cpu /out/runtime-packages.txt /tmp/runtime-packages.txt
# python3-grpcio runs the HEALTHCHECK (deploy/healthcheck.py).
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt \
      apt-get install -y --no-install-recommends python3 python3-grpcio \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/tpserve --create-home \
      --shell /usr/sbin/nologin tpserve \
 && mkdir -p /models
COPY --from=build-cpu /out/tpserve /out/tpserve-healthcheck /usr/local/bin/
LABEL org.opencontainers.image.title="tpserve (CPU)" \
      org.opencontainers.image.description="Tensor-parallel LLM inference server; mount the model at /models"
WORKDIR /var/lib/tpserve
USER 10001:10001
EXPOSE 50051 8000 9090 7001 9091
# The default command's public port; a worker's check is overridden with its own port
# (tpserve-healthcheck 127.0.0.1:7001), see deploy/docker-compose.yml.
ENV TPSERVE_HEALTH_ADDR=127.0.0.1:50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
  CMD ["/usr/local/bin/tpserve-healthcheck"]
ENTRYPOINT ["/usr/local/bin/tpserve"]
CMD ["serve", "--model=/models/SmolLM2-135M-Instruct.Q4_1.gguf", "--tp=2", \
     "--host=0.0.0.0", "--port=50051", "--metrics_port=9090"]

# ---------------------------------------------------------------------------------------------
# CUDA build: the CUDA devel image brings nvcc, cuBLAS and NCCL (libnccl-dev).
FROM nvidia/cuda:${CUDA_VERSION}-devel-${CUDA_UBUNTU} AS build-cuda
ARG DEBIAN_FRONTEND=noninteractive
# GPU architectures to compile for (CMake list): A100 and H100/H200 by default.
ARG CUDA_ARCHITECTURES="80;90"
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev prometheus-cpp-dev libgloo-dev nlohmann-json3-dev libgoogle-glog-dev \
      libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libboost-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPSERVE_DEBUG_INFO=none -DTPSERVE_CUDA=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" -DTPSERVE_TESTS=OFF -DTPSERVE_BENCH=OFF \
 && cmake --build /build --target tpserve -j"$(nproc)" \
 && install -D -m 0755 -s /build/server/tpserve /out/tpserve \
 && install -D -m 0755 deploy/healthcheck.py /out/tpserve-healthcheck \
 && bash deploy/runtime-packages.sh /out/tpserve > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

# ---------------------------------------------------------------------------------------------
# CUDA runtime: the default target. The runtime base image already has libcudart, cuBLAS and
# NCCL (their packages in the list are then no-ops; cuBLAS is opened with dlopen at first use,
# so ldd does not list it); the driver (libcuda) comes from the host through the NVIDIA
# container toolkit.
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${CUDA_UBUNTU} AS cuda
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build-cuda /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt \
      apt-get install -y --no-install-recommends python3 python3-grpcio \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/tpserve --create-home \
      --shell /usr/sbin/nologin tpserve \
 && mkdir -p /models
COPY --from=build-cuda /out/tpserve /out/tpserve-healthcheck /usr/local/bin/
LABEL org.opencontainers.image.title="tpserve (CUDA)" \
      org.opencontainers.image.description="Tensor-parallel LLM inference server; mount the model at /models"
WORKDIR /var/lib/tpserve
USER 10001:10001
EXPOSE 50051 8000 9090 7001 9091
ENV TPSERVE_HEALTH_ADDR=127.0.0.1:50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 \
  CMD ["/usr/local/bin/tpserve-healthcheck"]
ENTRYPOINT ["/usr/local/bin/tpserve"]
CMD ["serve", "--model=/models/SmolLM2-135M-Instruct.Q4_1.gguf", "--tp=2", \
     "--host=0.0.0.0", "--port=50051", "--metrics_port=9090"]
