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
  -- One whose __tostring raises is logged as such, and run goes on.
  ok(broker:publish(tbl, "y"))
  log = H.capture_log(function()
    local explodes = setmetatable({}, { __tostring = function() error("tostring explodes") end })
    ok(sub:run(function(d)
      if d.attempt == 1 then error(explodes) end
    end, { timeout = 0.5, max = 2 }))
  end)
  eq(#log, 1, "log messages")
  H.truthy(log[1][2]:find("a table value, whose __tostring failed", 1, true), "message: " .. log[1][2])
  eq(db:count("jobs"), 0, "rows")
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
  sub:close()
end)

-- Settlements off the Lua thread: run hands each ack or retry to the
-- settler's threads and pulls the next delivery, and returns once all of
-- them are done, so what it returns and the table agree at once.

--- A table of `form` holding `rows` rows ("1", "2", ...), and a broker on it;
-- also returns the ids.
local function filled(db, form, rows)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local list = {}
  for i = 1, rows do list[i] = tostring(i) end
  return tbl, broker, ok(broker:publish_many(tbl, list))
end

H.case("run: workers(4) settles every row before it returns", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  for _, settlers in ipairs({ false, 0, 1, 4 }) do -- default, here, one thread, four
    local label = "settlers " .. tostring(settlers)
    local rows = 120
    local list = {}
    for i = 1, rows do list[i] = tostring(i) end
    ok(broker:publish_many(tbl, list))
    local sub = H.subscribe(broker, tbl, { workers = 4 })
    local opts = { max = rows, timeout = H.WAIT_S }
    if settlers then opts.settlers = settlers end
    local kept = {}
    local handled, counts = ok(sub:run(function(d) kept[#kept + 1] = d end, opts))
    eq(handled, rows, label .. ": handled")
    eq(counts.acked, rows, label .. ": acked")
    eq(counts.retried + counts.failed + counts.settle_errors + counts.settled_by_handler, 0,
       label .. ": other counts")
    eq(db:count("jobs"), 0, label .. ": rows left when run returned")
    eq(sub:stat("in_work"), 0, label .. ": in work when run returned")
    eq(sub:stat("settled"), rows, label .. ": settled when run returned")
    for _, d in ipairs(kept) do eq(d.alive, false, label .. ": a delivery kept past its call") end
    sub:close()
  end
end)

H.case("run: a handler error retries the row on the settler", { forms = H.FORMS }, function(db, form)
  local tbl, broker = filled(db, form, 60)
  local sub = H.subscribe(broker, tbl, { workers = 4 })
  local attempts = {}
  local handled, counts
  local log = H.capture_log(function()
    handled, counts = ok(sub:run(function(d)
      attempts[d.id] = (attempts[d.id] or "") .. d.attempt
      if d.attempt == 1 and d.id % 3 == 0 then error("fails once") end
    end, { timeout = 1 }))
  end)
  eq(handled, 80, "handled: every row, and the failing third twice")
  eq(counts.failed, 20, "failed")
  eq(counts.retried, 20, "retried")
  eq(counts.acked, 60, "acked")
  eq(counts.settle_errors, 0, "settle errors")
  for id, seen in pairs(attempts) do eq(seen, id % 3 == 0 and "12" or "1", "attempts of row " .. id) end
  eq(#log, 20, "one error logged per failure")
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("run: an ack that fails on the settler is counted and logged", { forms = { "lease" } },
       function(db, form)
  local tbl, broker, ids = filled(db, form, 20)
  local victim = ids[7]
  local later = db.dialect == "sqlite" and "'2100-01-01T00:00:00.000+00:00'" or "'2100-01-01 00:00:00'"
  local sub = H.subscribe(broker, tbl, { workers = 4 })
  local handled, counts
  local log = H.capture_log(function()
    handled, counts = ok(sub:run(function(d)
      -- Another holder's lease on the row: the ack names a token it no longer has.
      if d.id == victim then
        ok(d:execute("UPDATE jobs SET locked_until = " .. later .. " WHERE id = " .. db:param(1), d.id))
      end
    end, { max = 20, timeout = H.WAIT_S }))
  end)
  eq(handled, 20, "handled")
  eq(counts.acked, 19, "acked")
  eq(counts.settle_errors, 1, "settle errors")
  eq(#log, 1, "log messages")
  eq(log[1][1], "warning", "level")
  H.truthy(log[1][2]:find("ack of row " .. victim .. " of jobs failed", 1, true), "message: " .. log[1][2])
  H.truthy(log[1][2]:find("LQ_LEASE_LOST", 1, true), "message names the code: " .. log[1][2])
  eq(db:count("jobs"), 1, "rows left")
  eq(db:count("jobs", "id = " .. victim), 1, "the victim is left to its holder")
end)

H.case("run: closing right after it returns, or from the handler, is clean", { forms = H.FORMS },
       function(db, form)
  local tbl, broker = filled(db, form, 40)
  local sub = H.subscribe(broker, tbl, { workers = 4 })
  local _, counts = ok(sub:run(function() end, { max = 20, timeout = H.WAIT_S }))
  sub:close()
  eq(counts.acked, 20, "acked before the close")
  eq(db:count("jobs"), 20, "rows left after the close")
  -- Closed by the handler: what was handed over still settles, and run ends.
  sub = H.subscribe(broker, tbl, { workers = 4 })
  local n = 0
  local handled
  handled, counts = ok(sub:run(function()
    n = n + 1
    if n == 5 then sub:close() end
  end, { timeout = H.WAIT_S }))
  eq(handled, 5, "handled before the close")
  eq(counts.acked, 5, "acked")
  broker:close()
  sub, broker = nil, nil
  collectgarbage("collect")
  eq(db:count("jobs"), 15, "rows left")
  if form == "lease" then eq(db:count("jobs", "locked_until IS NOT NULL"), 0, "rows locked") end
end)

H.case("run: stopping by max or timeout leaves nothing unsettled", { forms = H.FORMS },
       function(db, form)
  local tbl, broker = filled(db, form, 30)
  local sub = H.subscribe(broker, tbl, { workers = 4 })
  local handled, counts = ok(sub:run(function() end, { max = 7 }))
  eq(handled, 7, "max")
  eq(counts.acked, 7, "acked by max")
  eq(db:count("jobs"), 23, "rows left after max")
  eq(sub:stat("in_work"), 0, "in work after max")
  handled, counts = ok(sub:run(function() end, { timeout = 0.3 }))
  eq(handled, 23, "the rest, until the timeout")
  eq(counts.acked, 23, "acked until the timeout")
  eq(db:count("jobs"), 0, "rows left after the timeout")
  eq(sub:stat("in_work"), 0, "in work after the timeout")
  eq(sub:stat("settled"), 30, "settled")
end)

H.case("run: wrong argument types raise", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  local sub = H.subscribe(broker, tbl)
  H.raises("function expected", sub.run, sub, "not a function")
  H.raises("table expected", sub.run, sub, function() end, 5)
  H.raises("settlers must be an integer", sub.run, sub, function() end, { settlers = -1 })
  H.raises("settlers must be an integer", sub.run, sub, function() end, { settlers = "4" })
  H.raises("retry_delay_ms must be an integer", sub.run, sub, function() end, { retry_delay_ms = 0.5 })
  H.raises("unknown option 'timout'", sub.run, sub, function() end, { timout = 0.2 })
  H.raises("timeout must be a number", sub.run, sub, function() end, { timeout = "1" })
end)

-- A value run cannot use is refused before anything is claimed. A retry
-- delay retry_after refuses (negative, or past 9999-12-31T23:59:59.999Z from
-- now) used to fail every retry: each row went back unsettled, its attempt
-- unspent, past max_attempts and for good (run never returned without max);
-- 20000 settlers started 20000 threads.
H.case("run: option values out of range raise before anything is claimed", function(db)
  local tbl = H.make_table("lease", { retry_after = "retry_after", dead_letter = "jobs_dead" })
  db:create(tbl)
  db:create(H.dead_letter_table(tbl))
  local broker = H.open(db)
  ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl, { max_attempts = 2 })
  local calls = 0
  local function fail() calls = calls + 1; error("boom") end
  local TIME_MAX_MS = 253402300799999 -- 9999-12-31T23:59:59.999Z
  local YEAR_MS = 365 * 24 * 3600 * 1000
  local delay = "run: retry_delay_ms must be an integer from 0 to "
  for _, case in ipairs({
    { "retry_delay_ms", -1, delay },
    { "retry_delay_ms", 2^62, delay },
    { "retry_delay_ms", TIME_MAX_MS + 1, delay },
    { "retry_delay_ms", TIME_MAX_MS, delay }, -- past 9999-12-31 from now: the core's bound
    { "retry_delay_ms", 10000 * YEAR_MS, delay },
    { "retry_delay_ms", 0.5, delay },
    { "settlers", 4097, "run: settlers must be an integer from 0 to 4096" },
    { "settlers", 20000, "run: settlers must be an integer from 0 to 4096" },
    { "settlers", -1, "run: settlers must be an integer from 0 to 4096" },
    { "max", -1, "run: max must be an integer >= 0" },
    { "timeout", -1, "run: timeout must be a number of seconds >= 0" },
    { "timeout", 0 / 0, "run: timeout must be a number of seconds >= 0" },
  }) do
    local name, value, want = case[1], case[2], case[3]
    local opts = { timeout = 0.3, max = 3 }
    opts[name] = value
    local err = H.raises(want, sub.run, sub, fail, opts)
    H.truthy(err:find("got " .. tostring(value), 1, true), "the value in: " .. err)
    if name == "retry_delay_ms" then
      -- The range's end: the longest delay now, as the core counts it.
      local longest = tonumber(err:match("from 0 to (%d+) %(ms"))
      H.truthy(longest and longest > 7900 * YEAR_MS and longest < TIME_MAX_MS,
               "the longest delay now in: " .. err)
      H.truthy(err:find("9999-12-31T23:59:59.999Z", 1, true), "the latest time in: " .. err)
    end
  end
  eq(calls, 0, "handler calls")
  eq(sub:stat("delivered"), 0, "delivered")
  eq(db:count("jobs", "locked_until IS NULL"), 1, "the row unclaimed")
  -- A long delay that fits is taken, and the row's first attempt is its first.
  local attempts = {}
  local handled, counts
  H.capture_log(function()
    handled, counts = ok(sub:run(function(d)
      attempts[#attempts + 1] = d.attempt
      error("later")
    end, { timeout = 0.3, retry_delay_ms = 1000 * YEAR_MS }))
  end)
  eq(handled, 1, "handled once: the row is hidden for a thousand years")
  H.same_list(attempts, { 1 }, "attempts")
  eq(counts.retried, 1, "retried")
  eq(counts.settle_errors, 0, "settle errors")
  eq(db:count("jobs", "retry_after > " .. db.past), 1, "a retry_after set")
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
      -- The second, unsettled: released by the loop's end on Lua 5.4 (a
      -- to-be-closed value); older Luas leave it to release() or the GC.
      if not H.CLOSE then d:release() end
      break
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
