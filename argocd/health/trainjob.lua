-- Argo CD health of a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org).
-- Trainer v2.3.0 records Suspended, Complete and Failed conditions (a condition
-- counts while its status is "True"; Suspended turns False with reason Resumed)
-- and the state of each replicated job of its JobSet in status.jobsStatus.
-- spec.suspend marks a job held back, for example by Kueue until admission.
local hs = {}
local active = {}
local status = obj.status or {}
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
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

local suspended = obj.spec ~= nil and obj.spec.suspend == true

if active["Failed"] ~= nil then
  hs.status = "Degraded"
  hs.message = said(active["Failed"], "The TrainJob failed")
elseif active["Complete"] ~= nil then
  hs.status = "Healthy"
  hs.message = said(active["Complete"], "The TrainJob completed")
elseif active["Suspended"] ~= nil or suspended then
  hs.status = "Suspended"
  local queue = nil
  if obj.metadata ~= nil and obj.metadata.labels ~= nil then
    queue = obj.metadata.labels["kueue.x-k8s.io/queue-name"]
  end
  if queue ~= nil then
    hs.message = "Waiting for admission in Kueue queue " .. queue
  else
    hs.message = "The TrainJob is suspended"
  end
  if active["Suspended"] ~= nil and queue == nil then
    hs.message = said(active["Suspended"], hs.message)
  end
else
  local running = {}
  if status.jobsStatus ~= nil then
    for _, job in ipairs(status.jobsStatus) do
      if (job.active or 0) > 0 then
        table.insert(running, job.name .. " " .. (job.ready or 0) .. "/" .. job.active .. " ready")
      end
    end
  end
  hs.status = "Progressing"
  if #running > 0 then
    hs.message = "Training: " .. table.concat(running, ", ")
  else
    hs.message = "Waiting for the trainer controller"
  end
end
return hs
