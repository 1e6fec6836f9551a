"""Fixtures of policies/rdma.py beyond its main pair: who adds a network's RDMA request."""

from __future__ import annotations

from collections.abc import Callable

from tests.policies.fixtures import Docs, baseline, job, pods_of


def _operator_config(enable_injector: bool | None) -> dict:
    spec = {} if enable_injector is None else {"enableInjector": enable_injector}
    return {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": "SriovOperatorConfig",
        "metadata": {"name": "default", "namespace": "sriov-network-operator"},
        "spec": spec,
    }


def without_rdma_request(
    injector: bool | None = None, annotated: bool = True, ib_only: bool = False
) -> Callable[[], Docs]:
    """The baseline with no RDMA request in the training containers; `injector`: the
    render's SriovOperatorConfig enableInjector (None: no SriovOperatorConfig); `ib_only`:
    NCCL_NET=IB leaves NCCL no socket fallback."""

    def build() -> Docs:
        docs = baseline()
        for spec in pods_of(job(docs)):
            del spec["containers"][0]["resources"]["limits"]["nvidia.com/roce_vf"]
            spec["containers"][0].setdefault("env", []).append(
                {"name": "NCCL_IB_HCA", "value": "mlx5"}
            )
            if ib_only:
                spec["containers"][0]["env"].append({"name": "NCCL_NET", "value": "IB"})
        if not annotated:
            del docs[0]["metadata"]["annotations"]
        if injector is not None:
            docs.append(_operator_config(injector))
        return docs

    return build


MORE = {
    "rdma-resource-missing": [
        # the operator's config says the injector is off: nothing adds the request
        (without_rdma_request(injector=False), without_rdma_request(injector=True)),
        (without_rdma_request(annotated=False), baseline),
        # NCCL_NET=IB: no socket fallback, NCCL's init fails
        (without_rdma_request(injector=False, ib_only=True), without_rdma_request(injector=True)),
    ],
}
