"""`trainops kubeconform`: a drop-in for kubeconform in CI scripts written for it.

Same flags (`flags`), same discovery of files and resources (`resources`), same
statuses and messages (`checks`), same output formats (`output`), same exit codes
(`run`), checked against kubeconform's own acceptance suite (tests/peer/kubeconform).
YAML is read as kubeconform reads it (trainops.kubeyaml). Deliberate differences:
the `default` schema location is served offline from the core schemas bundled with
trainops (`schemas`), versions outside the bundled range use the nearest bundled one,
and validation is sequential (`-n` is accepted).
"""
