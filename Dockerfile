# One image for both commands: topoplace-agent (DaemonSet, prefetch init containers) and
# topoplace-webhook (Deployment: serve + the certs sidecar).
#   make image                      # docker/podman build -t topoplace:dev .
#   docker build -t REGISTRY/topoplace:TAG .
#
# Runs as uid/gid 65532 with a read-only root filesystem: the virtual environment is compiled
# to bytecode at build time and Python is told never to write bytecode at run time, so
# nothing is written outside the volumes the manifests mount.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# A venv without pip: the build stage's pip installs into it, so the final image has neither
# pip nor setuptools. Every dependency ships binary wheels; no compiler is needed.
RUN python -m venv --without-pip /opt/topoplace
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
COPY common ./common
COPY webhook ./webhook
RUN pip --python /opt/topoplace/bin/python install --compile . \
 && /opt/topoplace/bin/topoplace-agent --help >/dev/null \
 && /opt/topoplace/bin/topoplace-webhook --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="topoplace" \
      org.opencontainers.image.description="Topology-aware placement of AI training pods: node agent and admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/topoplace/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The official images ship the standard library without bytecode; compile it once here, since
# the read-only root filesystem would make every start (agent, sidecar, prefetch init
# container) recompile it in memory. compile_dir's result is ignored on purpose: a module that
# cannot be compiled is simply compiled at import, as before.
RUN python -c "import compileall, sysconfig; compileall.compile_dir(sysconfig.get_path('stdlib'), quiet=2, workers=0)"
COPY --from=build /opt/topoplace /opt/topoplace
# Numeric, so runAsNonRoot can verify it without an /etc/passwd entry.
USER 65532:65532
WORKDIR /tmp
CMD ["topoplace-webhook", "--help"]
