# cann-llm in a container: `cann-llm serve` as a non-root user (docs/deployment.md).
#
#   docker build -t cann-llm .                       # Python base image, the acl_host build
#   docker build -t cann-llm:npu --build-arg BASE=ascendai/cann:8.1.rc1-910b-ubuntu22.04-py3.10 .
#
# BASE is the image of both stages. An Ascend CANN toolkit image sets ASCEND_TOOLKIT_HOME, so the
# default CANN_LLM_BUILD=auto links the toolkit's libascendcl/libopapi/libnnopbase; any other base
# gets the host runtime (libacl_host). PULL_MODEL=1 bakes the default model into the image; with
# 0 the container serves a model from a mounted volume (CANN_LLM_MODEL=/models/NAME.gguf).
ARG BASE=python:3.12-slim-bookworm

# ---- build: the wheel, installed with the server extra into a venv ---------------------------
FROM ${BASE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# A C/C++ compiler when the base has none (python:*-slim); the CANN images bring gcc and cmake.
# Versions are the base distribution's own: pinning them would tie the file to one release.
# hadolint ignore=DL3008
RUN if ! command -v g++ >/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends gcc g++ \
      && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY pyproject.toml CMakeLists.txt README.md ./
COPY backend_cann/ backend_cann/
COPY runner/ runner/
COPY server/ server/
ARG CANN_LLM_BUILD=auto
RUN python3 -m venv /opt/cann-llm/venv \
    && CANN_LLM_BUILD="${CANN_LLM_BUILD}" /opt/cann-llm/venv/bin/pip install --no-cache-dir ".[server]"
ARG PULL_MODEL=1
ENV CANN_LLM_MODELS=/opt/cann-llm/models
RUN mkdir -p "${CANN_LLM_MODELS}" \
    && if [ "${PULL_MODEL}" = 1 ]; then /opt/cann-llm/venv/bin/cann-llm pull; fi

# ---- runtime ---------------------------------------------------------------------------------
FROM ${BASE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# A fixed numeric uid, so that mounted volumes and --user can name it (docs/deployment.md).
ARG UID=10001
RUN useradd --create-home --uid "${UID}" --shell /bin/bash cann-llm
COPY --from=build /opt/cann-llm/venv /opt/cann-llm/venv
COPY --from=build --chown=${UID} /opt/cann-llm/models /opt/cann-llm/models
COPY docker/entrypoint.sh docker/healthcheck.py /opt/cann-llm/
ENV PATH=/opt/cann-llm/venv/bin:${PATH} \
    CANN_LLM_MODELS=/opt/cann-llm/models \
    CANN_LLM_HOST=0.0.0.0 \
    CANN_LLM_PORT=8080 \
    PYTHONUNBUFFERED=1
USER ${UID}
WORKDIR /home/cann-llm
EXPOSE 8080
# /health is 503 while the model loads and 200 once it serves (docs/server.md).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python3", "/opt/cann-llm/healthcheck.py"]
ENTRYPOINT ["/opt/cann-llm/entrypoint.sh"]
CMD []
