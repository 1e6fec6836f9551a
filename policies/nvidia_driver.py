"""The GPU Operator's NVIDIADriver objects, as its NVIDIADriver controller reconciles them
(gpu-operator v26.3.3 `controllers/nvidiadriver_controller.go`, `internal/validator`).

The controller deploys nothing for a driver whose pre-compiled drivers come with
GPUDirect Storage (nvidia-fs) or GDRCopy (ReconcileFailed), and nothing for drivers whose
node selectors overlap (ConflictingNodeSelector): every NVIDIADriver's nodes must be its
own. Two drivers certainly overlap when one has no nodeSelector (every GPU node) or both
have the same one.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import mapping

GPU_OPERATOR = "https://github.com/NVIDIA/gpu-operator/blob/v26.3.3/"


def _selector(doc: Document) -> tuple[tuple[str, str], ...]:
    selector = mapping(mapping(doc.obj.get("spec")).get("nodeSelector"))
    return tuple(sorted((str(k), str(v)) for k, v in selector.items()))


def _enabled(spec: dict, key: str) -> bool:
    return mapping(spec.get(key)).get("enabled") is True


@resource_rule(
    id="nvidia-driver-spec",
    severity=ERROR,
    source=(
        GPU_OPERATOR + "controllers/nvidiadriver_controller.go#L154-L162",
        GPU_OPERATOR + "internal/validator/validator.go#L45-L71",
    ),
    title="An NVIDIADriver the GPU Operator can deploy: no pre-compiled driver with GDS or "
    "GDRCopy, nodes of its own",
    why="The GPU Operator's NVIDIADriver controller refuses pre-compiled drivers together with "
    "GPUDirect Storage or GDRCopy ('not supported along with pre-compiled NVIDIA drivers') and "
    "refuses drivers whose node selectors overlap (ConflictingNodeSelector): in both cases it "
    "deploys no driver, and the GPU nodes it should serve have none.",
    fix="Turn usePrecompiled off where gds or gdrcopy is enabled; give each NVIDIADriver a "
    "nodeSelector that no other one matches (for example by nvidia.com/gpu.product).",
    kinds=("NVIDIADriver",),
)
def nvidia_driver_spec(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if spec.get("usePrecompiled") is True:
        for key, name in (("gds", "GPUDirect Storage"), ("gdrcopy", "GDRCopy")):
            if _enabled(spec, key):
                yield Violation(
                    f"pre-compiled drivers with {name} ({key}.enabled): the controller "
                    "refuses the combination and deploys no driver",
                    ("spec", "usePrecompiled"),
                )
    mine = _selector(doc)
    for other in ctx.of_kind("NVIDIADriver"):
        if other is doc or other.name == doc.name:
            continue
        theirs = _selector(other)
        if not mine or not theirs or mine == theirs:
            reason = (
                "it has no nodeSelector"
                if not mine
                else f"{other.name} has no nodeSelector"
                if not theirs
                else "both have the same nodeSelector"
            )
            yield Violation(
                f"NVIDIADriver {doc.name}'s nodes overlap {other.name}'s ({reason}): the "
                "controller deploys neither (ConflictingNodeSelector)",
                ("spec", "nodeSelector"),
            )
            return
