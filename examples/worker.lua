-- A small worker in Lua: opens a SQLite queue, creates its table if missing,
-- publishes some jobs, works them on this thread with sub:run, and prints a
-- summary line.
--
--     lua5.4 examples/worker.lua [path.db] [jobs]      (or lua5.3, lua5.1, luajit)
--
-- With the module installed (cmake --install) nothing else is needed. From a
-- build tree, point Lua at it, e.g. for the build in build/lua and Lua 5.4:
--
--     LUA_CPATH="build/lua/lua/5.4/?.so;;" LUA_PATH="build/lua/lua/?.lua;;" lua5.4 examples/worker.lua
--
-- (the lines marked "source checkout" below also look there on their own).

-- Source checkout only: find the module in a build tree next to this file;
-- the C part is in a folder per Lua (5.4, 5.3, 5.1, luajit).
if not pcall(require, "libqueue") then
  local root = ((arg and arg[0] or ""):match("^(.*)/[^/]*$") or ".") .. "/.."
  local lua = jit and "luajit" or _VERSION:match("%d+%.%d+")
  for _, dir in ipairs({ os.getenv("LQ_BUILD_DIR") or "", root .. "/build/lua/lua",
                         root .. "/build/test/lua", root .. "/build/lua" }) do
    if dir ~= "" then
      package.cpath = dir .. "/" .. lua .. "/?.so;" .. package.cpath
      package.path = dir .. "/?.lua;" .. package.path
    end
  end
end

local libqueue = require("libqueue")

-- Log messages (the core's warnings, handler errors) go to this function, on
-- this thread; here the first line of each, without the traceback.
libqueue.set_logger(function(level, message)
  io.stderr:write("worker ", level, ": ", message:match("^[^\n]*"), "\n")
end)

local path = arg[1] or "worker.db"
local jobs = math.floor(tonumber(arg[2] or "") or 20)

-- The queue table: a lease (locked_until), attempts, and delayed retries.
local tbl = assert(libqueue.table{
  name = "jobs",
  payload = "payload",
  attempt = "attempt",
  locked_until = "locked_until",
  retry_after = "retry_after",
})

local broker = assert(libqueue.open("sqlite:" .. path, { pool_size = 4 }))

-- Create it if missing; a table that exists is checked against the description.
assert(broker:create_table(tbl))

-- Publish the jobs in one transaction.
local batch = {}
for i = 1, jobs do
  batch[i] = string.format('{"image": "cat-%d.png", "width": %d}', i, 100 + i)
end
local ids = assert(broker:publish_many(tbl, batch))

-- Work them: 4 rows claimed ahead, leases kept alive while a handler runs.
local sub = assert(broker:subscribe(tbl, { workers = 4, poll_interval_ms = 50 }))
local processed, retried = 0, 0
local handled, counts = sub:run(function(delivery)
  local width = tonumber(delivery.payload:match('"width": (%d+)'))
  -- Every seventh job fails on its first attempt: error() retries it (the
  -- error is logged), returning acks it.
  if width % 7 == 0 and delivery.attempt == 1 then
    retried = retried + 1
    error("transient failure on " .. delivery.payload)
  end
  processed = processed + 1
end, { timeout = 1, retry_delay_ms = 0 })
assert(handled, counts)

sub:close()
broker:close()

print(string.format('{"jobs": %d, "published": %d, "processed": %d, "retried": %d, "acked": %d}',
                    jobs, #ids, processed, retried, counts.acked))
