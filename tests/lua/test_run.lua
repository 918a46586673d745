-- sub:run and sub:deliveries: Lua handlers on the calling thread.
local H = require("harness")
local eq, ok, fails = H.eq, H.ok, H.fails

H.case("run: returning acks every delivery", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local ids = ok(broker:publish_many(tbl, { "a", "b", "c" }))
  local sub = H.subscribe(broker, tbl, { workers = 2 })
  local seen = {}
  local handled, counts = ok(sub:run(function(d) seen[d.id] = d.payload end, { timeout = 0.3 }))
  eq(handled, 3, "handled")
  eq(counts.acked, 3, "acked")
  eq(seen[ids[1]], "a", "a")
  eq(seen[ids[2]], "b", "b")
  eq(seen[ids[3]], "c", "c")
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("run: an error is logged and retries the delivery", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local row = ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  local attempts = {}
  local counts
  local log = H.capture_log(function()
    local handled
    handled, counts = ok(sub:run(function(d)
      attempts[#attempts + 1] = d.attempt
      if d.attempt == 1 then error("boom on row " .. d.id) end
    end, { timeout = 0.5, max = 2 }))
    eq(handled, 2, "handled")
  end)
  H.same_list(attempts, { 1, 2 }, "attempts")
  eq(counts.failed, 1, "failed")
  eq(counts.retried, 1, "retried")
  eq(counts.acked, 1, "acked")
  eq(#log, 1, "log messages")
  eq(log[1][1], "error", "level")
  H.truthy(log[1][2]:find("boom on row " .. row, 1, true), "message: " .. log[1][2])
  H.truthy(log[1][2]:find("retried", 1, true), "message says retried: " .. log[1][2])
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("run: error values that are not strings are logged too", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  local log = H.capture_log(function()
    ok(sub:run(function(d)
      if d.attempt == 1 then error(setmetatable({}, { __tostring = function() return "custom" end })) end
    end, { timeout = 0.5, max = 2 }))
  end)
  eq(#log, 1, "log messages")
  H.truthy(log[1][2]:find("custom", 1, true), "message: " .. log[1][2])
end)

H.case("run: the handler may settle", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { dead_letter = "jobs_dead" })
  db:create(tbl)
  db:create(H.dead_letter_table(tbl))
  local broker = H.open(db)
  ok(broker:publish_many(tbl, { "retry-then-ack", "dead" }))
  local sub = H.subscribe(broker, tbl)
  local _, counts = ok(sub:run(function(d)
    if d.payload == "dead" then
      ok(d:dead_letter())
    elseif d.attempt == 1 then
      ok(d:retry()) -- settled: the return does not ack
    end
  end, { timeout = 0.5 }))
  eq(counts.settled_by_handler, 2, "settled by the handler")
  eq(counts.acked, 1, "acked")
  eq(db:count("jobs"), 0, "rows left")
  eq(db:scalar("SELECT " .. db:text("payload") .. " FROM jobs_dead"), "dead", "dead letter")
end)

H.case("run: retry_delay_ms retries after a delay", function(db)
  local tbl = H.make_table("lease", { retry_after = "retry_after" })
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  H.capture_log(function()
    local handled = ok(sub:run(function() error("later") end,
                               { timeout = 0.3, retry_delay_ms = 3600 * 1000 }))
    eq(handled, 1, "handled once: the row is hidden for an hour")
  end)
  eq(db:count("jobs", "retry_after > " .. db.past), 1, "a retry_after set")
end)

H.case("run: max, timeout and stop from the handler end it", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish_many(tbl, { "1", "2", "3", "4", "5" }))
  local sub = H.subscribe(broker, tbl, { workers = 2 })
  eq(ok(sub:run(function() end, { max = 2 })), 2, "max")
  eq(db:count("jobs"), 3, "rows left after max")
  local n = 0
  eq(ok(sub:run(function()
    n = n + 1
    if n == 2 then sub:stop() end
  end)), 2, "stopped from the handler")
  eq(db:count("jobs"), 3 - 2, "rows left after stop")
  eq(db:count("jobs", "locked_until IS NOT NULL"), 0, "stop returned the rows claimed ahead")
  eq(ok(sub:run(function() end, { timeout = 0.1 })), 0, "a stopped subscription runs nothing")
  sub:close()
  sub = H.subscribe(broker, tbl)
  eq(ok(sub:run(function() end, { timeout = 0.3 })), 1, "timeout")
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("run: wrong argument types raise", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  local sub = H.subscribe(broker, tbl)
  H.raises("function expected", sub.run, sub, "not a function")
  H.raises("table expected", sub.run, sub, function() end, 5)
end)

H.case("deliveries: each delivery is released when the loop moves on or ends", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish_many(tbl, { "1", "2", "3" }))
  local sub = H.subscribe(broker, tbl)
  local kept
  local count = 0
  for d in sub:deliveries(0.3) do
    count = count + 1
    if count == 1 then
      kept = d
      ok(d:ack())
    else
      sub:stop() -- nothing claims the row again once released
      break      -- the second, unsettled: released by the loop's end
    end
  end
  eq(kept.alive, false, "the first was released when the loop moved on")
  -- The unsettled one went back at once, with no attempt spent.
  eq(db:count("jobs", "attempt = 1 AND locked_until IS NULL"), 2, "rows free and unspent")
  sub:close()
  sub = H.subscribe(broker, tbl)
  local payloads = {}
  for d in sub:deliveries(0.3) do
    payloads[#payloads + 1] = d.payload
    ok(d:ack())
  end
  eq(#payloads, 2, "the rest")
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("deliveries: ends when the subscription is stopped", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish_many(tbl, { "1", "2", "3" }))
  local sub = H.subscribe(broker, tbl)
  local n = 0
  for d in sub:deliveries() do -- no timeout: until stopped
    n = n + 1
    ok(d:ack())
    if n == 2 then sub:stop() end
  end
  eq(n, 2, "deliveries before the stop")
  fails("LQ_CLOSED", sub:next(0))
end)

H.run()
