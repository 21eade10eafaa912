-- wrk script of tests/bench/fair_share.py: one caller's flood of one route, the answers counted
-- by status. Arguments (after `--`): a file of request targets (path and query, one a line; each
-- connection's requests cycle through them), the method (GET when left out), and a file whose
-- bytes are every request's JSON body (left out: no body). `{n}` in a target becomes a number
-- no other request of the run has (a query that is never the same, so never a cached answer).
-- The credentials come with wrk's `-H "Authorization: Bearer <key>"`: wrk.format() below adds
-- wrk.headers, where -H puts them.

-- the answers counted by status, setup() and done(): counted.lua, beside this script
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "counted.lua")

function init(args)
  targets = {}
  for line in io.lines(args[1]) do
    if line ~= "" then targets[#targets + 1] = line end
  end
  method = args[2] or "GET"
  if args[3] and args[3] ~= "" then
    local file = assert(io.open(args[3], "rb"))
    body = file:read("*a")
    file:close()
    wrk.headers["Content-Type"] = "application/json"
  end
  i = ((id - 1) * 7919) % #targets -- the threads start at different targets
  n = id * 100000000
end

function request()
  i = i % #targets + 1
  n = n + 1
  local target = string.gsub(targets[i], "{n}", tostring(n))
  return wrk.format(method, target, nil, body)
end
