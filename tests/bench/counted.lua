-- What the wrk scripts of tests/bench share (stress_bbox.lua, fair_share.lua load it first, then
-- define init() and request()): each thread's answers counted by status, and done() printing the
-- lines _harness.parse_wrk reads: `wrk-status <status> <count>` and `wrk-summary k=v ...`.

local threads = {}
statuses = {} -- global: done() reads it from each thread

function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
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
      .. " p50_ms=%.1f p95_ms=%.1f p99_ms=%.1f max_ms=%.1f\n",
    summary.requests, summary.duration / 1e6, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000
  ))
end
