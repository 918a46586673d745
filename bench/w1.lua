-- W1 drain through the Lua module: a no-op handler with sub:run, which
-- pulls deliveries (the core claims ahead for `workers`), runs the handler on
-- this thread, as every Lua handler runs, and hands each ack to the module's
-- settler threads (one per worker).
--
-- The table is preloaded by `lq_bench setup` (untimed). The clock starts
-- when sub:run is called and stops when it returns, having handled N
-- deliveries and seen every ack done; bench/run then checks the table is
-- empty. Prints one JSON record, as lq_bench does:
--
--   LUA_CPATH="build/bench/lua/?.so;;" LUA_PATH="build/bench/lua/?.lua;;" \
--     lua5.4 bench/w1.lua URL FORM N [WORKERS] [POLL_MS]
--
-- Stock Lua has no sub-second wall clock: the time is read from
-- /proc/uptime (10 ms steps), which is well within the noise of a run of
-- a second or more.

local libqueue = require("libqueue")

local url, form = arg[1], arg[2]
local n = math.tointeger(tonumber(arg[3] or "20000"))
local workers = math.tointeger(tonumber(arg[4] or "4"))
local poll_ms = math.tointeger(tonumber(arg[5] or "50"))

local function uptime()
  local f = assert(io.open("/proc/uptime", "r"))
  local t = f:read("n")
  f:close()
  return t
end

local function db_name(u)
  if u:find("^sqlite:") then return "sqlite" end
  if u:find("^postgres") then return "postgresql" end
  return "mariadb"
end

local spec = { name = "lq_bench_jobs", payload = "payload", attempt = "attempt" }
if form == "lease" then spec.locked_until = "locked_until" end
if form == "advisory" then spec.advisory_lock = "job-{id}" end
local tbl = assert(libqueue.table(spec))
local broker = assert(libqueue.open(url))
local sub = assert(broker:subscribe(tbl, { workers = workers, poll_interval_ms = poll_ms }))

local started = uptime()
local handled, counts = sub:run(function(delivery)
  local _ = delivery.payload -- read it, as the C driver does
end, { max = n, timeout = 60 })
local seconds = uptime() - started
local claims, empty = sub:stat("claims"), sub:stat("empty_claims")
sub:close()
broker:close()

local ok = handled == n and counts and counts.acked == n
local function num(v) return v and string.format("%.3f", v) or "null" end
print(string.format(
  '{"kind": "lib", "db": "%s", "form": "%s", "binding": "lua", "workload": "W1", "n": %d, ' ..
  '"seconds": %s, "jobs_per_s": %s, "workers": %d, "poll_ms": %d, "claims": %s, "empty_claims": %s, "note": %s}',
  db_name(url), form, n, num(seconds), ok and string.format("%.1f", n / seconds) or "null",
  workers, poll_ms, tostring(claims), tostring(empty),
  ok and "null" or string.format('"handled %s of %d"', tostring(handled), n)))
os.exit(ok and 0 or 1)
