"""Evaluates ValidatingAdmissionPolicies offline, as the API server would at admission.

A cluster's render holds its policies, their bindings, the namespaces and the
parameter objects; `PolicySet.build` compiles every policy once (variables,
match conditions, validations and message expressions) and indexes them by the
resources they match. `PolicySet.denials(obj)` then answers what the API server
would answer to a request creating `obj`:

- a policy applies when its `matchConstraints` and the binding's `matchResources`
  match the request (resource rules by API group, version, plural resource or
  `resource/subresource`, and operation; namespace and object selectors, the
  namespace's labels taken from the render, `kubernetes.io/metadata.name` included;
  exclusions), then every `matchCondition` holds;
- the binding's `paramRef` picks the parameters: by name, or by selector, in its
  namespace or (for a namespaced parameter kind) in the request's namespace; none
  found is `parameterNotFoundAction` (Deny: the policy's failure policy applies);
- `variables` are evaluated in order, each seeing the earlier ones; a validation
  that is false denies with its `messageExpression` (when it evaluates to a
  non-empty string), else its `message`, else the expression; one that errors
  follows the policy's `failurePolicy` (Fail denies);
- the binding's `validationActions` say what a denial is: Deny refuses the request,
  Warn and Audit let it through with a warning or an audit annotation.

Expressions see `object`, `oldObject`, `params`, `request`, `namespaceObject` and
`variables`, with the CEL runtime and extensions of `trainops.admission.cel`. A
policy using a library only the API server has (authorizer, quantity, ...) cannot
be compiled here: it is reported once and not evaluated, never silently passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainops.admission.workloads import selector_matches

GROUP = "admissionregistration.k8s.io"
POLICY, BINDING = "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"
OFFLINE_USER = {"username": "trainops:offline", "groups": ["system:authenticated"]}
_VARIABLES = ("object", "oldObject", "params", "request", "namespaceObject", "variables")
_ENV: Any = None


def _env() -> Any:
    global _ENV
    if _ENV is None:
        # Imported here: loading the CEL runtime costs more than checking a render that
        # holds no admission policy.
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_optional, ext_strings

        _ENV = cel.NewEnv(
            variables={name: cel.Type.DYN for name in _VARIABLES},
            extensions=[ext_strings.ExtStrings(2), ext_optional.ExtOptional()],
        )
    return _ENV


def guess_resource(kind: str) -> str:
    """The plural resource of a kind, as apimachinery's UnsafeGuessKindToResource makes it."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


@dataclass(frozen=True)
class Denial:
    """What the API server says about a request one binding of a policy refuses."""

    policy: str
    binding: str
    message: str
    actions: tuple[str, ...]  # Deny, Warn, Audit

    @property
    def text(self) -> str:
        return (
            f"ValidatingAdmissionPolicy '{self.policy}' with binding '{self.binding}' "
            f"denied request: {self.message}"
        )


@dataclass
class _Expression:
    source: str
    program: Any


@dataclass
class _Validation:
    check: _Expression
    message: str
    message_expression: _Expression | None


@dataclass
class _Policy:
    name: str
    spec: dict[str, Any]
    failure_fails: bool
    variables: list[tuple[str, _Expression]] = field(default_factory=list)
    conditions: list[tuple[str, _Expression]] = field(default_factory=list)
    validations: list[_Validation] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)


class PolicySet:
    """The compiled policies and bindings of one render, and what they refuse."""

    def __init__(self, documents: Iterable[dict[str, Any]]):
        self.problems: dict[str, str] = {}  # policy name -> why it cannot be evaluated here
        self._policies: dict[str, _Policy] = {}
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._objects: list[dict[str, Any]] = []
        bindings = []
        for obj in documents:
            if not isinstance(obj, dict):
                continue
            kind, group = obj.get("kind"), str(obj.get("apiVersion", "")).rpartition("/")[0]
            if group == GROUP and kind == POLICY:
                policy = self._compile(obj)
                if policy is not None:
                    self._policies[policy.name] = policy
            elif group == GROUP and kind == BINDING:
                bindings.append(obj)
            else:
                if kind == "Namespace" and obj.get("apiVersion") == "v1":
                    self._namespaces[_name(obj)] = obj
                self._objects.append(obj)
        for binding in bindings:
            policy = self._policies.get(str(_spec(binding).get("policyName", "")))
            if policy is not None:
                policy.bindings.append(binding)

    def __bool__(self) -> bool:
        return any(p.bindings for p in self._policies.values())

    # -- compilation -------------------------------------------------------------------

    def _compile(self, obj: dict[str, Any]) -> _Policy | None:
        name, spec = _name(obj), _spec(obj)
        policy = _Policy(name, spec, spec.get("failurePolicy", "Fail") != "Ignore")
        try:
            for variable in _list(spec.get("variables")):
                policy.variables.append((variable["name"], self._expr(variable["expression"])))
            for condition in _list(spec.get("matchConditions")):
                policy.conditions.append((condition["name"], self._expr(condition["expression"])))
            for validation in _list(spec.get("validations")):
                message_expression = validation.get("messageExpression")
                policy.validations.append(
                    _Validation(
                        self._expr(validation["expression"]),
                        str(validation.get("message") or ""),
                        self._expr(message_expression) if message_expression else None,
                    )
                )
        except (KeyError, TypeError) as exc:
            self.problems[name] = f"ValidatingAdmissionPolicy {name}: missing field {exc}"
            return None
        except RuntimeError as exc:
            reason = str(exc).splitlines()[0].removeprefix("INVALID_ARGUMENT: ")
            self.problems[name] = (
                f"ValidatingAdmissionPolicy {name} cannot be compiled here ({reason}); "
                "it is not evaluated"
            )
            return None
        return policy

    @staticmethod
    def _expr(source: str) -> _Expression:
        return _Expression(source, _env().compile(source))

    # -- admission ---------------------------------------------------------------------

    def denials(
        self,
        obj: dict[str, Any],
        operation: str = "CREATE",
        old: dict[str, Any] | None = None,
        user: str = OFFLINE_USER["username"],
        subresource: str = "",
    ) -> list[Denial]:
        """Every binding that refuses `user`'s request for `obj` (empty: admitted), made
        to `subresource` of it if given (an UPDATE of pods/ephemeralcontainers carries
        the whole pod). What a render holds is applied by a person or Argo CD, never by a
        controller: the default user is neither."""
        request = self._request(obj, operation, user, subresource)
        namespace = _namespace(obj)
        namespace_obj = self._namespace_object(namespace) if namespace else None
        found: list[Denial] = []
        for policy in self._policies.values():
            if not policy.bindings or not _matches(
                policy.spec.get("matchConstraints"), request, obj, namespace_obj
            ):
                continue
            for binding in policy.bindings:
                bspec = _spec(binding)
                if "matchResources" in bspec and not _matches(
                    bspec.get("matchResources"), request, obj, namespace_obj, policy=False
                ):
                    continue
                found.extend(
                    self._evaluate(policy, binding, obj, old, request, namespace_obj, namespace)
                )
        return found

    def _evaluate(
        self,
        policy: _Policy,
        binding: dict[str, Any],
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        request: dict[str, Any],
        namespace_obj: dict[str, Any] | None,
        namespace: str,
    ) -> list[Denial]:
        bspec = _spec(binding)
        actions = tuple(str(a) for a in _list(bspec.get("validationActions"))) or ("Deny",)

        def deny(message: str) -> Denial:
            return Denial(policy.name, _name(binding), message, actions)

        params_list: list[dict[str, Any] | None] = [None]
        if "paramKind" in policy.spec:
            params_list = self._params(policy, bspec, namespace)
            if not params_list:
                action = (bspec.get("paramRef") or {}).get("parameterNotFoundAction", "Deny")
                if action == "Allow":
                    return []
                reference = bspec.get("paramRef") or {}
                return [deny(f"no params found for policy binding with `{_ref(reference)}`")]
        out = []
        for params in params_list:
            data = {
                "object": obj,
                "oldObject": old,
                "params": params,
                "request": request,
                "namespaceObject": namespace_obj,
            }
            message = self._run(policy, data)
            if message is not None:
                out.append(deny(message))
        return out

    def _run(self, policy: _Policy, data: dict[str, Any]) -> str | None:
        """The denial message of the first validation that fails, or None."""
        for _, condition in policy.conditions:
            result, error = _eval(condition, {**data, "variables": {}})
            if error is not None:
                return error if policy.failure_fails else None
            if result is not True:
                return None  # the request is not one this policy is about
        variables: dict[str, Any] = {}
        failed: dict[str, str] = {}
        for name, expression in policy.variables:
            value, error = _eval(expression, {**data, "variables": variables})
            if error is None:
                variables[name] = value
            else:  # an error only for the validations that read it, as the API server's lazy
                failed[name] = error  # evaluation makes it
        data = {**data, "variables": variables}
        for validation in policy.validations:
            error = next(
                (e for n, e in failed.items() if f"variables.{n}" in validation.check.source),
                None,
            )
            result = None
            if error is None:
                result, error = _eval(validation.check, data)
            if error is not None:
                if policy.failure_fails:
                    return error
                continue
            if result is not True:
                return _message(validation, data)
        return None

    def _params(
        self, policy: _Policy, bspec: dict[str, Any], namespace: str
    ) -> list[dict[str, Any]]:
        kind = policy.spec.get("paramKind") or {}
        reference = bspec.get("paramRef") or {}
        where = reference.get("namespace") or namespace
        candidates = [
            o
            for o in self._objects
            if o.get("apiVersion") == kind.get("apiVersion")
            and o.get("kind") == kind.get("kind")
            and (_namespace(o) == where or not where)
        ]
        if reference.get("name"):
            return [o for o in candidates if _name(o) == reference["name"]][:1]
        selector = reference.get("selector")
        if isinstance(selector, dict):
            return [o for o in candidates if selector_matches(selector, _labels(o))]
        return []

    def _request(
        self, obj: dict[str, Any], operation: str, user: str, subresource: str = ""
    ) -> dict[str, Any]:
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        kind = str(obj.get("kind", ""))
        request = {
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": guess_resource(kind)},
            "name": _name(obj),
            "operation": operation,
            "userInfo": {**OFFLINE_USER, "username": user},
            "dryRun": False,
        }
        if subresource:
            request["subResource"] = subresource
        if _namespace(obj):
            request["namespace"] = _namespace(obj)
        return request

    def _namespace_object(self, namespace: str) -> dict[str, Any]:
        found = self._namespaces.get(namespace)
        obj = dict(found) if found else {"apiVersion": "v1", "kind": "Namespace"}
        metadata = dict(obj.get("metadata") or {})
        labels = dict(metadata.get("labels") or {})
        # The API server labels every namespace with its own name.
        labels["kubernetes.io/metadata.name"] = namespace
        metadata.update(name=namespace, labels=labels)
        obj["metadata"] = metadata
        return obj


def _eval(expression: _Expression, data: dict[str, Any]) -> tuple[Any, str | None]:
    try:
        result = expression.program.eval(data=data)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        return None, f"expression '{expression.source}' resulted in error: {exc}"
    if result.type().name().upper() == "ERROR":
        return None, f"expression '{expression.source}' resulted in error: {result.value()}"
    return result.plain_value(), None


def _message(validation: _Validation, data: dict[str, Any]) -> str:
    if validation.message_expression is not None:
        text, error = _eval(validation.message_expression, data)
        if error is None and isinstance(text, str) and text.strip():
            return text.strip()
    return validation.message or f"failed expression: {validation.check.source}"


def _matches(
    constraints: Any,
    request: dict[str, Any],
    obj: dict[str, Any],
    namespace_obj: dict[str, Any] | None,
    policy: bool = True,
) -> bool:
    if not isinstance(constraints, dict):
        return False
    rules = _list(constraints.get("resourceRules"))
    # A policy matches only the resources its rules name; a binding without rules narrows
    # nothing ("when resourceRules is unset, it does not constrain resource matching").
    if (rules or policy) and not any(_rule_matches(r, request, obj) for r in rules):
        return False
    if any(_rule_matches(r, request, obj) for r in _list(constraints.get("excludeResourceRules"))):
        return False
    selector = constraints.get("namespaceSelector")
    in_namespace = isinstance(selector, dict) and selector and namespace_obj is not None
    if in_namespace and not selector_matches(selector, _labels(namespace_obj)):
        return False
    selector = constraints.get("objectSelector")
    return not (isinstance(selector, dict) and not selector_matches(selector, _labels(obj)))


def _rule_matches(rule: Any, request: dict[str, Any], obj: dict[str, Any]) -> bool:
    if not isinstance(rule, dict):
        return False
    resource = request["resource"]

    def among(values: Any, value: str) -> bool:
        return any(v in ("*", value) for v in _list(values))

    def resource_among(values: Any) -> bool:
        # "pods" is the resource alone, "pods/x" one subresource, "pods/*" all of them;
        # "*" every resource and "*/*" every resource and subresource.
        name, sub = resource["resource"], request.get("subResource", "")
        wanted = f"{name}/{sub}" if sub else name
        for v in _list(values):
            v = str(v)
            if v in (wanted, "*/*") or (v == "*" and not sub):
                return True
            head, _, tail = v.partition("/")
            if sub and tail and (head in ("*", name)) and tail in ("*", sub):
                return True
        return False

    names = _list(rule.get("resourceNames"))
    scope = rule.get("scope", "*")
    namespaced = bool(_namespace(obj))
    return (
        among(rule.get("apiGroups"), resource["group"])
        and among(rule.get("apiVersions"), resource["version"])
        and resource_among(rule.get("resources"))
        and among(rule.get("operations"), request["operation"])
        and (not names or request["name"] in names)
        and (scope == "*" or (scope == "Namespaced") == namespaced)
    )


def _ref(reference: dict[str, Any]) -> str:
    if reference.get("name"):
        where = reference.get("namespace")
        return f"{where}/{reference['name']}" if where else str(reference["name"])
    return "selector"


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespace(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}
