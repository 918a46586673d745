-- Attempt counting, lost leases, slow handlers, rows going back to the queue.
local H = require("harness")
local eq, ok, fails = H.eq, H.ok, H.fails

-- The lease and advisory forms count at the claim (the column reads one
-- ahead while a delivery is out); the row lock form counts at the settlement
-- that puts the row back (its claim is not visible outside its transaction).
H.case("attempts: the first delivery reads 1, the column holds n+1 after n", { forms = H.FORMS },
       function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  local n = 3
  for attempt = 1, n do
    local d = H.one(sub)
    eq(d.attempt, attempt, "attempt read")
    eq(math.type(d.attempt), "integer", "attempt type")
    -- Read while held: once retried, the row may be claimed again.
    local counted = form == "row_lock" and 0 or 1
    eq(db:scalar("SELECT attempt FROM jobs"), tostring(attempt + counted), "attempt column")
    if attempt < n then ok(d:retry()) else ok(d:ack()) end
    d:release()
  end
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("attempt is 0 without an attempt column", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { attempt = false })
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  local d = H.one(sub)
  eq(d.attempt, 0, "attempt")
  ok(d:ack())
end)

H.case("a released unsettled delivery goes back at once, no attempt spent", { forms = H.FORMS },
       function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local row = ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  do
    local d = H.one(sub)
    eq(d.id, row, "id")
    eq(d.attempt, 1, "attempt")
    d:release() -- unsettled
  end
  local d = H.one(sub, 2)
  eq(d.id, row, "id again")
  eq(d.attempt, 1, "attempt again")
  sub:stop()
  d:release()
  if form == "lease" then eq(db:scalar("SELECT locked_until FROM jobs"), nil, "locked_until") end
  eq(db:scalar("SELECT attempt FROM jobs"), "1", "attempt column")
end)

for _, second_lease_ms in ipairs({ 90000, 30000 }) do
  H.case("lease lost: a late ack returns LQ_LEASE_LOST and changes nothing (second lease "
         .. second_lease_ms .. " ms)", function(db)
    local tbl = H.make_table("lease")
    db:create(tbl)
    local broker = H.open(db)
    local other = H.open(db) -- another "process"
    local row = ok(broker:publish(tbl, "x"))
    local first = H.subscribe(broker, tbl)
    local second = H.subscribe(other, tbl, { lease_ms = second_lease_ms })
    local mine = H.one(first)
    H.truthy(mine.lease_expiry_ms > 0, "a lease token")
    -- The lease runs out: another claim takes the row.
    db:exec("UPDATE jobs SET locked_until = " .. db.past)
    local theirs = H.one(second)
    eq(theirs.id, row, "the second claim's row")
    local message = fails("LQ_LEASE_LOST", mine:ack())
    H.truthy(message:find(tostring(row), 1, true), "the message names the row: " .. message)
    eq(db:count("jobs"), 1, "a lost lease changed the row")
    ok(theirs:ack())
    eq(db:count("jobs"), 0, "rows left")
  end)
end

H.case("a pulled delivery slower than two leases keeps its lease and acks", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  local row = ok(broker:publish(tbl, "slow"))
  local sub = H.subscribe(broker, tbl, { lease_ms = 1000 })
  local d = H.one(sub)
  local token = d.lease_expiry_ms
  -- A slow handler on the Lua thread: 2.5 leases.
  os.execute("sleep 2.5")
  H.truthy(d.lease_expiry_ms > token, "the keeper extended the lease")
  H.truthy(sub:stat("extensions") >= 2, "extensions: " .. sub:stat("extensions"))
  -- Another claim in the meantime would have taken the row had it expired.
  local other = H.open(db)
  local thief = H.subscribe(other, tbl)
  H.none(thief, 0.3, "a row whose lease is kept")
  eq(ok(d:ack()), true, "ack after the slow handler")
  eq(d.id, row, "id")
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("run: a handler slower than two leases still acks", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "slow"))
  local sub = H.subscribe(broker, tbl, { lease_ms = 1000 })
  local log = H.capture_log(function()
    local handled, counts = ok(sub:run(function(d)
      -- Busy, not sleeping: the Lua thread never returns to the binding.
      -- os.time has whole seconds: this spins for 2 to 3 s, 2+ leases.
      local deadline = os.time() + 3
      while os.time() < deadline do end
      eq(d.attempt, 1, "attempt")
    end, { max = 1 }))
    eq(handled, 1, "handled")
    eq(counts.acked, 1, "acked")
    eq(counts.settle_errors, 0, "settle errors")
  end)
  eq(#log, 0, "log messages: " .. (log[1] and log[1][2] or ""))
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("stop returns the rows claimed ahead; held deliveries stay valid", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  local payloads = {}
  for i = 1, 10 do payloads[i] = tostring(i) end
  ok(broker:publish_many(tbl, payloads))
  local sub = H.subscribe(broker, tbl, { workers = 4 })
  local held = H.one(sub)
  ok(sub:stop())
  ok(sub:stop()) -- idempotent
  local claimed = db:query("SELECT id FROM jobs WHERE locked_until IS NOT NULL")
  eq(#claimed, 1, "claimed rows after stop")
  eq(claimed[1][1], tostring(held.id), "the held row")
  fails("LQ_CLOSED", sub:next(0.1))
  ok(held:ack())
  held:release()
  sub:close()
  eq(db:count("jobs"), 9, "rows left")
  eq(db:count("jobs", "locked_until IS NOT NULL"), 0, "claimed rows")
end)

H.run()
