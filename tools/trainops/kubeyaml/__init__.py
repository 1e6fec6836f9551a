"""YAML read the way the cluster reads it.

kubectl, Argo CD and kubeconform turn YAML into JSON with sigs.k8s.io/yaml, whose
go-yaml v2 fork is a port of libyaml with YAML 1.1 scalars. This package reads a
document with libyaml itself (PyYAML's C parser, events only) and applies go-yaml
v2's decoding rules on top: `scalars` resolves plain scalars and converts map keys
to JSON strings, `reader` builds the document (merge keys, aliases, duplicate keys,
depth and alias-expansion bounds). Facts carried from sigs.k8s.io/yaml v1.4.0
(`goyaml.v2/resolve.go`, `goyaml.v2/decode.go`, `goyaml.v2/scannerc.go`, `yaml.go`)
as vendored by kubeconform at commit e65429b.
"""
