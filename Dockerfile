# The cosmos-serve images for KubeRay (k8s/), two targets of one file:
#
#   gpu  the model pods: Ray's CUDA 13.0 image + the exact package set of the last
#        passing tests/gpu run (constraints/gpu.txt: vLLM 0.24.0, torch 2.11.0,
#        whose PyPI wheel is the CUDA 13.0 build)
#   cpu  the head and decode pods: Ray's CPU image + the same versions without
#        vLLM and CUDA wheels (constraints/image-cpu.txt; torch 2.11.0+cpu)
#
#   docker build --target gpu -t registry.example.com/cosmos-serve:0.1.0 .
#   docker build --target cpu -t registry.example.com/cosmos-serve-cpu:0.1.0 .
#
# NOT BUILT HERE: the development machine has no Docker daemon and no access to
# Docker Hub, so this file has never been built or run by the project's CI.
#
# Both stages use one Ray version and one Python (a Ray cluster needs both equal
# on every node) and copy the same project code; a unit test checks that, and
# that RAY_VERSION equals the ray[serve] pin in pyproject.toml and rayVersion in
# k8s/base/rayservice.yaml. Ray's image tags are VERSION-pyXY-{cpu,cuXYZ}: the
# form of Ray's own source (ray/runtime_env/runtime_env.py names
# `rayproject/ray:2.39.0-py312-cu123`, ray/autoscaler/_private/fake_multi_node/
# test_utils.py `rayproject/ray:nightly-py{major}{minor}-cpu`); that 2.60.0 is
# published as -py312-cu130 and -py312-cpu was not checked against Docker Hub
# here (no access). vLLM 0.24.0's wheel is built with CUDA 13.0: the GPU nodes
# need an NVIDIA driver that supports CUDA 13 (R580 or newer).
#
# Layers: the pinned dependencies first (~4.4 GB on the GPU side, rebuilt only
# when the constraints file changes), then the code, installed --no-deps (a code
# change rebuilds a few hundred kB). The code is the runtime only: serve_app/ and
# configs/ (the load tester, the benches, the tests and the dev tools stay out; .dockerignore). The pins are installed --no-deps too: they
# are the exact set that ran (generated from results/gpu/gpu-freeze.txt by
# `python -m cosmos_tools.constraints`), which pip's resolver would refuse as a
# whole (the header of each file says why, e.g. Ray 2.60 declares aiohttp>=3.14.4
# and 3.14.3 ran).
ARG RAY_VERSION=2.60.0
ARG PYTHON_TAG=py312
ARG CUDA_TAG=cu130

FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-cpu AS cpu
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
WORKDIR /home/ray/cosmos-serve
COPY --chown=ray:users constraints/image-cpu.txt constraints/
RUN pip install --no-cache-dir --no-deps --extra-index-url "${TORCH_INDEX}" -r constraints/image-cpu.txt
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users serve_app ./serve_app
COPY --chown=ray:users configs ./configs
# A regular (not editable) install: Serve imports serve_app.app:build_app from
# site-packages on every node, whatever the working directory.
RUN pip install --no-cache-dir --no-deps . \
 && python -c "import serve_app.app, ray; print('cosmos-serve (CPU) on Ray', ray.__version__)"

FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-${CUDA_TAG} AS gpu
WORKDIR /home/ray/cosmos-serve
COPY --chown=ray:users constraints/gpu.txt constraints/
RUN pip install --no-cache-dir --no-deps -r constraints/gpu.txt
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users serve_app ./serve_app
COPY --chown=ray:users configs ./configs
RUN pip install --no-cache-dir --no-deps . \
 && python -c "import serve_app.app, vllm; print('cosmos-serve with vLLM', vllm.__version__)"
