"""Developer tooling for cosmos-serve: not part of the runtime package or the image.

``cosmos_tools.k8s`` renders and checks the KubeRay manifests in ``k8s/``;
``cosmos_tools.constraints`` turns a ``pip freeze`` of a passing GPU run into
the image's pinned package set (``constraints/gpu.txt``, ``constraints/image-cpu.txt``).
"""
