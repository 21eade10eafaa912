-- wrk script of tests/bench/stress.py: BBOX renders of one raster layer, and the answers counted
-- by status. Arguments (after `--`): path, minx, miny, maxx, maxy (EPSG:3857), size in px.
-- Each request shifts the box by up to a tenth of its size, so that no two renders are alike.
-- The credentials come with wrk's `-H "Authorization: Bearer <key>"` (stress.py passes the
-- service's admin key): wrk.format() below adds wrk.headers, where -H puts them.

-- the answers counted by status, setup() and done(): counted.lua, beside this script
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "counted.lua")

function init(args)
  path = args[1]
  box = { tonumber(args[2]), tonumber(args[3]), tonumber(args[4]), tonumber(args[5]) }
  size = args[6]
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
