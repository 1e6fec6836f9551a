"""Schemas: CRD conversion, schema lookup (kubeconform locations), document checks."""
