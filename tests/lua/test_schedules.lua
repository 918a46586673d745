-- Work driven by time: broker:schedule enqueues each tick once, carries the
-- tick in its headers, stops at unschedule, and refuses a bad timing naming
-- the field; a row published with expires_in_ms is never started past it;
-- broker:cancel takes a row out of its queue, in work too, in every form; a
-- dead letter says why in a dead_reason column.
local H = require("harness")
local eq, ok, fails = H.eq, H.ok, H.fails

local function sleep(seconds)
  assert(os.execute(string.format("sleep %.3f", seconds)))
end

H.case("an interval schedule enqueues each tick once, with its tick", { forms = { "lease" } },
       function(db, form)
  local tbl = H.make_table(form, { headers = "headers" })
  db:create(tbl)
  local broker = H.open(db)
  local other = H.open(db)
  ok(broker:schedule(tbl, "beat", { every_ms = 100, payload = "b", headers = { from = "lua" } }))
  ok(other:schedule(tbl, "beat", { every_ms = 100, payload = "b" }))
  sleep(1.2)
  ok(broker:unschedule("beat"))
  ok(other:unschedule("beat"))
  fails("LQ_MISUSE", broker:unschedule("beat"))
  local sub = H.subscribe(broker, tbl)
  local seen, ticks = {}, {}
  for d in sub:deliveries(0.3) do
    local tick = d.headers["lq-scheduled-for"]
    eq(seen[tick], nil, "tick " .. tostring(tick) .. " once")
    seen[tick] = true
    ticks[#ticks + 1] = tick
    eq(d.payload, "b", "payload")
    eq(d.headers["lq-schedule"], "beat", "the schedule's name")
    ok(d:ack())
  end
  H.truthy(#ticks >= 5, "ticks enqueued: " .. #ticks)
  eq(db:count("jobs"), 0, "rows left")
  broker:close()
  other:close()
end)

H.case("a bad timing is refused, naming the field", { forms = { "lease" } }, function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local _, message, code = broker:schedule(tbl, "bad", { cron = "* 25 * * *" })
  eq(code, "LQ_MISUSE", "code")
  H.truthy(message:find("cron field hour", 1, true), message)
  _, message, code = broker:schedule(tbl, "bad", { cron = "* * * * *", tz = "Nowhere/City" })
  eq(code, "LQ_MISUSE", "code")
  H.truthy(message:find("tz", 1, true), message)
  _, message, code = broker:schedule(tbl, "bad", { payload = "x" })
  eq(code, "LQ_MISUSE", "code")
  H.truthy(message:find("needs cron or every_ms", 1, true), message)
  -- A field's error names the schedule too, as the core's do.
  eq(fails("LQ_MISUSE", broker:schedule(tbl, "bad", { every_ms = 0 })),
     "schedule bad: option every_ms must be between 1 and 1099511627776, not 0")
  eq(fails("LQ_MISUSE", broker:schedule(tbl, "bad", { every_ms = 100, priority = "x" })),
     "schedule bad: message field 'priority' takes an integer, got string")
  eq(fails("LQ_MISUSE", broker:schedule(tbl, "bad", { every_ms = 100, colour = "red" })),
     "schedule bad: unknown message field 'colour'")
  eq(db:count("jobs"), 0, "rows")
  broker:close()
end)

H.case("a row past its expiry is dead-lettered unrun", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { expires_at = "expires_at", dead_letter = "jobs_dead" })
  db:create(tbl)
  db:create(H.dead_letter_table(tbl))
  local broker = H.open(db)
  ok(broker:publish(tbl, "late", { expires_in_ms = 100 }))
  sleep(0.3)
  local fresh = ok(broker:publish(tbl, "fresh", { expires_in_ms = 60000 }))
  local sub = H.subscribe(broker, tbl)
  local d = H.one(sub)
  eq(d.id, fresh, "the row within its expiry")
  ok(d:ack())
  H.none(sub, 0.3, "the expired row")
  eq(sub:stat("expired_unstarted"), 1, "expired_unstarted")
  eq(db:count("jobs_dead"), 1, "dead letters")
  sub:close()
  broker:close()
end)

H.case("a cancelled row is never run, and a cancelled run is told",
       { forms = { "lease", "advisory", "row_lock" } },
       function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local queued = ok(broker:publish(tbl, "queued"))
  ok(broker:cancel(tbl, queued))
  fails("LQ_NOT_FOUND", broker:cancel(tbl, queued))
  local running = ok(broker:publish(tbl, "running"))
  local sub = H.subscribe(broker, tbl, { lease_ms = 2000 })
  local d = H.one(sub)
  eq(d.id, running, "the row not cancelled")
  ok(broker:cancel(tbl, running))
  fails("LQ_CANCELLED", d:ack())
  eq(d:cancelled(), true, "the run told")
  eq(db:count("jobs"), 0, "rows left")
  sub:close()
  broker:close()
end)

H.case("a dead letter says why", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { dead_letter = "jobs_dead", dead_reason = "dead_reason" })
  db:create(tbl)
  local broker = H.open(db)
  local queued = ok(broker:publish(tbl, "queued"))
  ok(broker:cancel(tbl, queued))
  local told = ok(broker:publish(tbl, "told"))
  local sub = H.subscribe(broker, tbl)
  local d = H.one(sub)
  eq(d.id, told, "the row left")
  ok(d:dead_letter())
  eq(db:scalar("SELECT dead_reason FROM jobs_dead WHERE id = " .. queued), "cancelled", "a cancel")
  eq(db:scalar("SELECT dead_reason FROM jobs_dead WHERE id = " .. told), "dead_letter", "its handler")
  sub:close()
  broker:close()
end)

H.run()
