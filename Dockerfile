# The cosmos-serve image for KubeRay (k8s/): Ray's GPU image plus this project
# installed with its `gpu` extra (vLLM 0.24.0, which pins torch 2.11.0).
#
#   docker build -t registry.example.com/cosmos-serve:0.1.0 .
#   docker push registry.example.com/cosmos-serve:0.1.0
#
# NOT BUILT HERE: the development machine has no Docker daemon and no access to
# Docker Hub, so this file has never been built or run by the project's CI.
#
# The Ray version of the base image must equal the ray[serve] pin in
# pyproject.toml and rayVersion in k8s/base/rayservice.yaml (a unit test checks
# all three). vLLM 0.24.0's wheel is built with CUDA 13.0: the GPU nodes need an
# NVIDIA driver that supports CUDA 13 (R580 or newer).
ARG RAY_IMAGE=rayproject/ray:2.60.0-py312-gpu
FROM ${RAY_IMAGE}
# torch 2.11.0 built with CUDA 13.0, matching the vLLM 0.24.0 wheel (pip prefers
# 2.11.0+cu130 from this index over a plain 2.11.0).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130

WORKDIR /home/ray/cosmos-serve
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users serve_app ./serve_app
COPY --chown=ray:users loadtest ./loadtest
COPY --chown=ray:users configs ./configs

# A regular (not editable) install: Serve imports serve_app.app:build_app from
# site-packages on every node, whatever the working directory.
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" ".[gpu]" \
 && python -c "import serve_app.app, vllm; print('cosmos-serve with vLLM', vllm.__version__)"
