"""Rendering: find targets, collect their inputs, build them with kustomize."""
