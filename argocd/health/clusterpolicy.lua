-- Argo CD health of the GPU Operator's ClusterPolicy (owned by the gpu-operator
-- add-on). Healthy once every operand is ready. Any other state is Degraded,
-- not Progressing: a sync waits on a Progressing resource without a time limit,
-- and one GPU node that never gets ready (or a dcgm-exporter ServiceMonitor
-- without the Prometheus Operator) would hold it for good. Degraded ends the
-- sync and shows the state; the next sync or retry looks again.
local hs = {}
if obj.status == nil or obj.status.state == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the GPU Operator to reconcile the ClusterPolicy"
elseif obj.status.state == "ready" then
  hs.status = "Healthy"
  hs.message = "All GPU operands are ready"
else
  hs.status = "Degraded"
  hs.message = "GPU operands are " .. obj.status.state .. ": see the ClusterPolicy's conditions"
end
return hs
