"""trainops' training-aware policy pack.

Each module holds the rules of one concern, registered with
`trainops.policy` (`resource_rule`, `pod_rule`, `render_rule`).
`trainops policies list` shows them, `trainops policies explain ID` explains
one, and docs/policies.md is generated from them. Settings and exemptions:
config.yaml in this directory.
"""
