-- Argo CD health of the GPU Operator's ClusterPolicy: Healthy once every
-- operand (driver, toolkit, device plugin...) is ready. The platform sync waits
-- for it before the NCCL preflight, which needs working GPUs.
local hs = {}
if obj.status == nil or obj.status.state == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the GPU Operator"
elseif obj.status.state == "ready" then
  hs.status = "Healthy"
  hs.message = "All GPU operands are ready"
elseif obj.status.state == "disabled" then
  hs.status = "Suspended"
  hs.message = "The ClusterPolicy is disabled"
else
  hs.status = "Progressing"
  hs.message = "GPU operands are " .. obj.status.state
end
return hs
