-- The advisory lock form: rows with the same key are never out at once, rows
-- of other keys are.
local H = require("harness")
local eq, ok = H.eq, H.ok

H.case("advisory exclusivity per key, across subscriptions and brokers", function(db)
  local tbl = ok(H.libqueue.table{ name = "jobs", payload = "payload", attempt = "attempt",
                                   partition_key = "account", advisory_lock = "acct-{account}" })
  eq(tbl:form(), "advisory", "form")
  db:create(tbl)
  local broker = H.open(db)
  local other_broker = H.open(db)
  local keys = { "A", "B", "C" }
  local messages = {}
  for i = 1, 4 do
    for _, key in ipairs(keys) do
      messages[#messages + 1] = { payload = key .. i, partition_key = key }
    end
  end
  ok(broker:publish_many(tbl, messages))
  local subs = { H.subscribe(broker, tbl, { workers = 4 }),
                 H.subscribe(other_broker, tbl, { workers = 4 }) }

  local held = {}     -- deliveries out, oldest first
  local out = {}      -- key -> the delivery of that key out now
  local most_keys = 0 -- most keys out at once
  local acked, turn, empty = 0, 0, 0
  while acked < #messages do
    turn = turn + 1
    local sub = subs[turn % 2 + 1]
    local d = sub:next(0.15)
    empty = d and 0 or empty + 1
    if d then
      local key = d.partition_key
      if out[key] then
        error(string.format("two rows of key %s out at once: %s and %s", key,
                            out[key].payload, d.payload))
      end
      out[key] = d
      held[#held + 1] = d
      local n = 0
      for _ in pairs(out) do n = n + 1 end
      if n > most_keys then most_keys = n end
    elseif #held > 0 and empty >= 2 then
      -- Neither subscription had more while these are out: settle the oldest.
      empty = 0
      local oldest = table.remove(held, 1)
      out[oldest.partition_key] = nil
      ok(oldest:ack())
      oldest:release()
      acked = acked + 1
    end
    if turn > 400 then error("the rows were not all delivered: " .. acked .. " acked") end
  end
  H.truthy(most_keys >= 2, "rows of different keys were out at once (most: " .. most_keys .. ")")
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("advisory: a held key blocks its rows, other keys go on", function(db)
  local tbl = ok(H.libqueue.table{ name = "jobs", payload = "payload",
                                   partition_key = "account", advisory_lock = "acct-{account}" })
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish_many(tbl, { { payload = "a1", partition_key = "A" },
                                { payload = "a2", partition_key = "A" },
                                { payload = "b1", partition_key = "B" } }))
  local sub = H.subscribe(broker, tbl, { workers = 3 })
  local first = H.one(sub)
  local second = H.one(sub)
  local got = { first.payload, second.payload }
  table.sort(got)
  H.same_list(got, { "a1", "b1" }, "one row per key")
  H.none(sub, 0.3, "a2 while a1 is out")
  local a1 = first.payload == "a1" and first or second
  ok(a1:ack())
  a1:release()
  local third = H.one(sub)
  eq(third.payload, "a2", "a2 once a1 is settled")
  ok(third:ack())
  local b1 = first.payload == "b1" and first or second
  ok(b1:ack())
end)

H.run()
