"""Blind set of good/bad training-manifest pairs, written without reading the policy pack."""
