# syntax=docker/dockerfile:1
# The surreal image: every component (learner, actors, evaluator) and TensorBoard run from it.
#
#   make image                      # surreal:local (CPU, python:3.11-slim): docker, else podman
#                                   #   (scripts/image.sh; no registry: a debootstrap base)
#   docker build -t surreal:cuda \
#     --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 \
#     --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
#
# A base without Python (the CUDA images) gets the distribution's python3 (3.12 on Ubuntu 24.04).
# The same through make: BASE_IMAGE=nvidia/cuda:... IMAGE_BUILD_FLAGS="--build-arg TORCH_INDEX=..."
# make image IMAGE=surreal:cuda. No build step needs a GPU: only the pod that runs it does.
# Pods run it as uid 10001 with a read-only root filesystem: everything written goes to /tmp or
# /var/lib/surreal, which the pod mounts (see orchestrator/kube_pods.py).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.13.0
# The CPU wheels of PyTorch (no CUDA libraries: a much smaller image).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/surreal \
    PATH=/opt/surreal/bin:$PATH \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/matplotlib

RUN if ! command -v python3 >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/surreal

# torch first, in its own layer: the largest download, and the project's own changes keep it.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"

WORKDIR /src
COPY pyproject.toml README.md ./
COPY surreal/ surreal/
COPY protocol/ protocol/
COPY orchestrator/ orchestrator/
COPY provisioner/ provisioner/
COPY algorithms/ algorithms/
COPY runtime/ runtime/
RUN pip install . && rm -rf /src
# The worked example of an algorithm of one's own (`--algo examples.a2c:A2C`, docs/algorithms/writing.md).
COPY examples/ /opt/surreal/examples/
ENV PYTHONPATH=/opt/surreal

# The uid the pods' securityContext names (runAsUser: 10001); no login, no home of its own.
RUN (command -v useradd >/dev/null || (apt-get update && apt-get install -y --no-install-recommends passwd)) \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin surreal \
    && mkdir -p /var/lib/surreal && chown 10001:10001 /var/lib/surreal
USER 10001:10001
WORKDIR /var/lib/surreal
# Pods give the full command (`surreal component ROLE --spec FILE`); no ENTRYPOINT to get in the way.
CMD ["surreal", "--help"]
