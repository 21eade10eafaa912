-- wrk script of tests/bench/stress.py: BBOX renders of one raster layer, and the answers counted
-- by status. Arguments (after `--`): path, minx, miny, maxx, maxy (EPSG:3857), size in px.
-- Each request shifts the box by up to a tenth of its size, so that no two renders are alike.
-- done() prints lines the script parses: `wrk-status <status> <count>` and `wrk-summary k=v ...`.
-- The credentials come with wrk's `-H "Authorization: Bearer <key>"` (stress.py passes the
-- service's admin key): wrk.format() below adds wrk.headers, where -H puts them.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end

function init(args)
  path = args[1]
  box = { tonumber(args[2]), tonumber(args[3]), tonumber(args[4]), tonumber(args[5]) }
  size = args[6]
  statuses = {} -- global: done() reads it from each thread
  math.randomseed(id)
end

function request()
  local dx = (math.random() - 0.5) * 0.2 * (box[3] - box[1])
  local dy = (math.random() - 0.5) * 0.2 * (box[4] - box[2])
  local bbox = string.format(
    "%.2f,%.2f,%.2f,%.2f", box[1] + dx, box[2] + dy, box[3] + dx, box[4] + dy
  )
  return wrk.format(
    "GET",
    string.format("%s?BBOX=%s&width=%s&height=%s&srs=EPSG:3857", path, bbox, size, size)
  )
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
      .. " p50_ms=%.0f p95_ms=%.0f max_ms=%.0f\n",
    summary.requests, summary.duration / 1e6, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency.max / 1000
  ))
end
