"""`trainops diff`: what a change does to the resources Argo CD syncs.

revisions (materialise a Git revision) -> render both sides -> compare (per-resource,
per-field) -> warnings (changes the API server or the operator will not apply in
place, edits to runs that exist) -> formats (text, json, markdown).
"""
