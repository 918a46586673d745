-- Run by ctest under valgrind (lua_valgrind): opens, publishes, works and
-- closes through every path of the binding that allocates, in both forms, so
-- that a leak or a double free in the module, the log shim or the core
-- shows up. The harness ends with os.exit(..., true), closing the Lua state.
local H = require("harness")
local libqueue = H.libqueue
local eq, ok, fails = H.eq, H.ok, H.fails

H.case("open, work and close", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { headers = "headers", retry_after = "retry_after",
                                   dead_letter = "jobs_dead" })
  db:create(tbl)
  db:create(H.dead_letter_table(tbl))
  local broker = H.open(db, { pool_size = 3 })
  local messages = {}
  for i = 1, 60 do
    messages[i] = { payload = "job\0" .. i, headers = { n = tostring(i) } }
  end
  eq(#ok(broker:publish_many(tbl, messages)), 60, "ids")
  fails("LQ_MISUSE", broker:publish(tbl, "x", { bogus = 1 }))

  local sub = H.subscribe(broker, tbl, { workers = 3, max_attempts = 3 })
  -- Every outcome once, pulled.
  local d = H.one(sub); ok(d:retry()); d:release()
  d = H.one(sub); ok(d:retry_after(0)); d:release()
  d = H.one(sub); ok(d:dead_letter()); d:release()
  d = H.one(sub); ok(d:execute("SELECT 1")); d:release()
  d = H.one(sub) -- left to the collector, unsettled
  d = nil
  collectgarbage("collect")
  -- The rest through run, with a handler that fails now and then (logged).
  local failing = 0
  H.capture_log(function()
    local handled = ok(sub:run(function(delivery)
      local _ = delivery.payload .. delivery.headers.n .. tostring(delivery.group)
      if delivery.attempt == 1 and delivery.id % 7 == 0 then
        failing = failing + 1
        error("fails on its first attempt")
      end
    end, { timeout = 1 }))
    H.truthy(handled >= 59, "handled " .. handled)
  end)
  H.truthy(failing > 0, "some handlers failed")
  eq(db:count("jobs"), 0, "rows left")
  eq(db:count("jobs_dead"), 1, "dead letters")

  -- Handles left for the collector, in no particular order.
  sub:close()
  ok(broker:publish(tbl, "last"))
  local keep = H.subscribe(broker, tbl)
  local held = H.one(keep)
  local _ = held.payload
  broker, keep = nil, nil
end)

H.case("errors allocate nothing that stays", function(db)
  for _ = 1, 20 do
    fails("LQ_DIALECT", libqueue.open("nosuch://x"))
    fails("LQ_MISUSE", libqueue.table{ name = "t", advisory_lock = "{" })
  end
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  for _ = 1, 20 do
    fails("LQ_SCHEMA", broker:subscribe(H.make_table("lease", { name = "missing" })))
    fails("LQ_SCHEMA", broker:publish(tbl, "x", { group = "g" }))
    H.raises("string expected", broker.publish, broker, tbl, {})
  end
end)

H.run()
