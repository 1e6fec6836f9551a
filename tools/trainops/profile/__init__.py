"""Cluster profiles: the cluster.yaml model and the overlays and runs generated from it."""
