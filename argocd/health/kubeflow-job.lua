-- Argo CD health of a Kubeflow training job: the Training Operator's v1 kinds
-- (PyTorchJob, MPIJob, TFJob...) and the MPI Operator v2's MPIJob v2beta1, which
-- Argo CD keys by group and kind alike. Both operators record Created, Running,
-- Restarting, Suspended, Succeeded and Failed conditions and honour
-- runPolicy.suspend; a condition counts while its status is "True". A job still
-- training is Progressing, as Argo CD treats a batch Job.
local hs = {}
local active = {}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.status == "True" then
      active[condition.type] = condition
    end
  end
end

local function said(condition, fallback)
  if condition.message ~= nil and condition.message ~= "" then
    return condition.message
  end
  return fallback
end

local suspended = obj.spec ~= nil and obj.spec.runPolicy ~= nil and obj.spec.runPolicy.suspend == true

if active["Failed"] ~= nil then
  hs.status = "Degraded"
  hs.message = said(active["Failed"], "The job failed")
elseif active["Succeeded"] ~= nil then
  hs.status = "Healthy"
  hs.message = said(active["Succeeded"], "The job succeeded")
elseif active["Suspended"] ~= nil or suspended then
  hs.status = "Suspended"
  local queue = nil
  if obj.metadata.labels ~= nil then
    queue = obj.metadata.labels["kueue.x-k8s.io/queue-name"]
  end
  if queue ~= nil then
    hs.message = "Waiting for admission in Kueue queue " .. queue
  else
    hs.message = "The job is suspended"
  end
elseif active["Restarting"] ~= nil then
  hs.status = "Progressing"
  hs.message = said(active["Restarting"], "Restarting after a failure")
elseif active["Running"] ~= nil then
  hs.status = "Progressing"
  hs.message = said(active["Running"], "Training")
elseif active["Created"] ~= nil then
  hs.status = "Progressing"
  hs.message = "Created; waiting for pods to be scheduled"
else
  hs.status = "Progressing"
  hs.message = "Waiting for the training operator"
end
return hs
