-- broker:prune deletes the finished rows a processed_at column keeps, once
-- older than its age; broker:prune_dead_letters the dead letters, by when
-- they were dead-lettered. Rows queued or younger stay; bad calls refused.
local H = require("harness")
local eq, ok, fails = H.eq, H.ok, H.fails

local HOUR_MS = 3600 * 1000

-- Three rows: one finished long ago, one finished now, one queued.
local function finished_rows(db, form)
  local tbl = H.make_table(form, { processed_at = "processed_at" })
  local broker = H.open(db)
  ok(broker:create_table(tbl))
  ok(broker:publish_many(tbl, { "a", "b", "c" }))
  local sub = H.subscribe(broker, tbl)
  local first = H.one(sub)
  ok(first:ack())
  ok(H.one(sub):ack())
  sub:close()
  db:exec("UPDATE jobs SET processed_at = " .. db.past .. " WHERE id = " .. first.id)
  return broker, tbl
end

H.case("finished rows past the cut go, the others stay", { forms = { "lease" } }, function(db, form)
  local broker, tbl = finished_rows(db, form)
  eq(ok(broker:prune(tbl, HOUR_MS)), 1, "the backdated row")
  eq(db:count("jobs"), 2, "the young finished row and the queued one stay")
  eq(ok(broker:prune(tbl, HOUR_MS)), 0, "nothing older left")
  eq(db:count("jobs", "processed_at IS NULL"), 1, "the queued row")
  fails("LQ_MISUSE", broker:prune(tbl, -1))
  fails("LQ_MISUSE", broker:prune(tbl, 0, { group = "g" }))
  H.raises("integer", function() broker:prune(tbl, 1.5) end)
  H.raises("unknown option", function() broker:prune(tbl, 0, { colour = 1 }) end)
  broker:close()
  fails("LQ_CLOSED", broker:prune(tbl, 0))
end)

H.case("dead letters go by when they were dead-lettered", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { retry_after = "retry_after", dead_letter = "jobs_dead" })
  local broker = H.open(db)
  ok(broker:create_table(tbl))
  ok(broker:publish_many(tbl, { "one", "two" }))
  db:exec("UPDATE jobs SET retry_after = " .. db.past) -- due long ago
  local sub = H.subscribe(broker, tbl)
  for _ = 1, 2 do ok(H.one(sub):dead_letter()) end
  sub:close()
  eq(ok(broker:prune_dead_letters(tbl, HOUR_MS)), 0, "dead-lettered just now")
  db:exec("UPDATE jobs_dead SET retry_after = " .. db.past)
  eq(ok(broker:prune_dead_letters(tbl, HOUR_MS)), 2, "both, backdated")
  eq(ok(broker:stats(tbl)).dead_letters, 0, "none left")
  fails("LQ_MISUSE", broker:prune(tbl, 0)) -- no processed_at column
  broker:close()
end)

H.case("retain_ms prunes as the subscription idles", { forms = { "lease" } }, function(db, form)
  local broker, tbl = finished_rows(db, form)
  local sub = H.subscribe(broker, tbl, { retain_ms = HOUR_MS })
  local held = H.one(sub) -- the queued row, in work: it stays
  for _ = 1, 100 do
    if db:count("jobs") == 2 then break end
    eq(sub:next(0.05), nil, "nothing more to deliver")
  end
  eq(db:count("jobs"), 2, "the backdated row went; the young one and the one in work stay")
  ok(held:ack())
  sub:close()
  H.raises("retain_ms needs a processed_at column", function()
    assert(broker:subscribe(H.make_table(form), { retain_ms = HOUR_MS }))
  end)
  broker:close()
end)

H.run()
