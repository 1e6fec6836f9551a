-- Argo CD health of a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org).
-- Conditions: Created, Suspended, Complete, Failed; spec.suspend marks a job
-- held back (for example by Kueue).
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

if active["Failed"] ~= nil then
  hs.status = "Degraded"
  hs.message = said(active["Failed"], "The TrainJob failed")
elseif active["Complete"] ~= nil then
  hs.status = "Healthy"
  hs.message = said(active["Complete"], "The TrainJob completed")
elseif active["Suspended"] ~= nil or (obj.spec ~= nil and obj.spec.suspend == true) then
  hs.status = "Suspended"
  hs.message = "The TrainJob is suspended"
  if active["Suspended"] ~= nil then
    hs.message = said(active["Suspended"], hs.message)
  end
elseif active["Created"] ~= nil then
  hs.status = "Progressing"
  hs.message = said(active["Created"], "Training")
else
  hs.status = "Progressing"
  hs.message = "Waiting for the trainer controller"
end
return hs
