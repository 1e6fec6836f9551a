"""trainops: keeps a GitOps repository for multi-node GPU training correct.

The package renders kustomizations with real kustomize, validates every document
against strict JSON schemas (core Kubernetes kinds and imported CRDs), runs the
training-aware policy pack and reports findings for people and CI.
"""

__version__ = "0.1.0"
