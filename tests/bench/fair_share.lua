-- wrk script of tests/bench/fair_share.py: one caller's flood of one route, the answers counted
-- by status. Arguments (after `--`): a file of request targets (path and query, one a line; each
-- connection's requests cycle through them), the method (GET when left out), and a file whose
-- bytes are every request's JSON body (left out: no body). `{n}` in a target becomes a number
-- no other request of the run has (a query that is never the same, so never a cached answer).
-- done() prints lines the script parses: `wrk-status <status> <count>` and `wrk-summary k=v ...`.
-- The credentials come with wrk's `-H "Authorization: Bearer <key>"`: wrk.format() below adds
-- wrk.headers, where -H puts them.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end

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
  statuses = {} -- global: done() reads it from each thread
  i = ((id - 1) * 7919) % #targets -- the threads start at different targets
  n = id * 100000000
end

function request()
  i = i % #targets + 1
  n = n + 1
  local target = string.gsub(targets[i], "{n}", tostring(n))
  return wrk.format(method, target, nil, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do
      total[status] = (total[status] or 0) + count
    end
  end
  for status, count in pairs(total) do
    io.write(string.format("wrk-status %d %d\n", status, count))
  end
  local e = summary.errors
  io.write(string.format(
    "wrk-summary requests=%d seconds=%.1f connect=%d read=%d write=%d timeout=%d"
      .. " p50_ms=%.1f p99_ms=%.1f max_ms=%.1f\n",
    summary.requests, summary.duration / 1e6, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000
  ))
end
