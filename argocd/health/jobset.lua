-- Argo CD health of a JobSet (jobset.x-k8s.io), the object Kubeflow Trainer v2
-- runs each TrainJob on. JobSet v0.12.0 records Completed, Failed, Suspended,
-- StartupPolicyInProgress and StartupPolicyCompleted conditions, counts
-- restarts in status.restarts and ready pods per replicated job; a condition
-- counts while its status is "True". spec.suspend marks a JobSet held back (by
-- Kueue or its TrainJob).
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

local function restarts()
  if status.restarts ~= nil and status.restarts > 0 then
    return " after " .. status.restarts .. " restart(s)"
  end
  return ""
end

local suspended = obj.spec ~= nil and obj.spec.suspend == true

if active["Failed"] ~= nil or status.terminalState == "Failed" then
  hs.status = "Degraded"
  hs.message = "The JobSet failed" .. restarts()
  if active["Failed"] ~= nil then
    hs.message = said(active["Failed"], hs.message)
  end
elseif active["Completed"] ~= nil or status.terminalState == "Completed" then
  hs.status = "Healthy"
  hs.message = "The JobSet completed"
  if active["Completed"] ~= nil then
    hs.message = said(active["Completed"], hs.message)
  end
elseif active["Suspended"] ~= nil or suspended then
  hs.status = "Suspended"
  hs.message = "The JobSet is suspended"
  if active["Suspended"] ~= nil then
    hs.message = said(active["Suspended"], hs.message)
  end
elseif active["StartupPolicyInProgress"] ~= nil then
  hs.status = "Progressing"
  hs.message = said(active["StartupPolicyInProgress"], "Starting replicated jobs in order")
else
  local ready, jobs = 0, 0
  if status.replicatedJobsStatus ~= nil then
    for _, job in ipairs(status.replicatedJobsStatus) do
      jobs = jobs + 1
      ready = ready + (job.ready or 0)
    end
  end
  hs.status = "Progressing"
  if jobs > 0 then
    hs.message = ready .. " job(s) ready in " .. jobs .. " replicated job(s)" .. restarts()
  else
    hs.message = "Waiting for the JobSet controller"
  end
end
return hs
