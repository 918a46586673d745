-- Publishing: payloads as bytes, 64-bit ids, batches, groups, headers,
-- partition keys, priorities, dedup keys.
local H = require("harness")
local eq, ok, fails = H.eq, H.ok, H.fails

--- Pull and ack until nothing comes; returns the deliveries' fields.
local function drain(sub, timeout)
  local out = {}
  for d in sub:deliveries(timeout or 0.3) do
    out[#out + 1] = { id = d.id, payload = d.payload, group = d.group,
                      partition_key = d.partition_key, headers = d.headers }
    ok(d:ack())
  end
  return out
end

local function all_bytes(size)
  local parts = {}
  for i = 0, size - 1 do parts[#parts + 1] = string.char(i % 256) end
  return table.concat(parts)
end

local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

H.case("an empty payload round trips", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local a = ok(broker:publish(tbl, ""))
  local b = ok(broker:publish(tbl)) -- nil payload: ""
  local sub = H.subscribe(broker, tbl)
  local got = drain(sub)
  eq(#got, 2, "deliveries")
  for _, d in ipairs(got) do
    H.truthy(d.id == a or d.id == b, "id")
    eq(d.payload, "", "payload")
  end
end)

H.case("a binary payload with NULs round trips", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local payload = "\0" .. all_bytes(256) .. "\0\0end\0"
  local row = ok(broker:publish(tbl, payload))
  eq(db:scalar("SELECT " .. db:hex("payload") .. " FROM jobs"), hex(payload), "payload in SQL")
  local sub = H.subscribe(broker, tbl)
  local d = H.one(sub)
  eq(d.id, row, "id")
  eq(#d.payload, #payload, "payload size")
  eq(d.payload, payload, "payload")
  ok(d:ack())
end)

H.case("a 4 MiB payload round trips", { forms = { "lease" } }, function(db, form)
  local tbl = H.make_table(form)
  db:create(tbl)
  local broker = H.open(db)
  local payload = all_bytes(256):rep(4 * 4096)
  ok(broker:publish(tbl, payload))
  local sub = H.subscribe(broker, tbl)
  local d = H.one(sub, 10)
  H.truthy(d.payload == payload, "payload differs")
  ok(d:ack())
end)

-- Every 64-bit id from Lua 5.3 on; before, where numbers are doubles, every
-- id of less than 2^53.
H.case("64-bit ids round trip exactly", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { id_generated = false })
  db:create(tbl)
  local broker = H.open(db)
  local big, top
  if H.INTEGERS then
    big, top = math.tointeger(2 ^ 53) + 1, math.maxinteger -- neither is a double
  else
    big, top = 2 ^ 52 + 1, 2 ^ 53 - 1 -- the largest integer below which doubles hold every one
  end
  local ids = { big, top, -big }
  local function text(id) return string.format("%d", id) end
  for _, id in ipairs(ids) do
    eq(ok(broker:publish(tbl, text(id), { id = id })), id, "returned id")
  end
  local stored = {}
  for _, row in ipairs(db:query("SELECT id FROM jobs ORDER BY id")) do stored[#stored + 1] = row[1] end
  H.same_list(stored, { text(-big), text(big), text(top) }, "ids in SQL")
  local sub = H.subscribe(broker, tbl)
  local seen = {}
  for _, d in ipairs(drain(sub)) do
    eq(math.type(d.id), "integer", "id type")
    eq(text(d.id), d.payload, "id read back")
    seen[d.id] = true
  end
  for _, id in ipairs(ids) do H.truthy(seen[id], "delivered id " .. text(id)) end
end)

H.case("publishing without an id to a table whose ids are not generated fails",
       function(db)
  local tbl = H.make_table("lease", { id_generated = false })
  db:create(tbl)
  local broker = H.open(db)
  local message = fails("LQ_SCHEMA", broker:publish(tbl, "x"))
  H.truthy(message:find("no id", 1, true), "message: " .. message)
  eq(db:count("jobs"), 0, "rows")
end)

H.case("publish_many returns the ids in order", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { priority = "priority" })
  db:create(tbl)
  local broker = H.open(db)
  local ids = ok(broker:publish_many(tbl, { "one", { payload = "two", priority = 3 },
                                              { payload = "three" } }))
  eq(#ids, 3, "ids")
  H.truthy(ids[1] ~= ids[2] and ids[2] ~= ids[3] and ids[1] ~= ids[3], "distinct ids")
  local rows = db:query("SELECT id, " .. db:text("payload") .. " FROM jobs ORDER BY id")
  eq(#rows, 3, "rows")
  local by_id = {}
  for _, row in ipairs(rows) do by_id[row[1]] = row[2] end
  eq(by_id[tostring(ids[1])], "one", "first")
  eq(by_id[tostring(ids[2])], "two", "second")
  eq(by_id[tostring(ids[3])], "three", "third")
  local empty = ok(broker:publish_many(tbl, {}))
  eq(#empty, 0, "ids of an empty batch")
end)

H.case("publish_many is all or nothing", function(db)
  local tbl = H.make_table("lease") -- no group column
  db:create(tbl)
  local broker = H.open(db)
  fails("LQ_SCHEMA", broker:publish_many(tbl, { "fine", { payload = "bad", group = "g" } }))
  eq(db:count("jobs"), 0, "rows")
end)

H.case("one publish's errors count its messages alike, from 0", function(db)
  local tbl = H.make_table("lease", { dedup_key = "dedup_key" }) -- no group column
  db:create(tbl)
  local broker = H.open(db)
  -- The second message, refused by the module and by the core.
  local by_module = fails("LQ_MISUSE", broker:publish_many(tbl, { "a", { payload = "b", priority = "1" } }))
  H.truthy(by_module:find("^message 1: message field 'priority'"), by_module)
  local by_core = fails("LQ_SCHEMA", broker:publish_many(tbl, { "a", { payload = "b", group = "g" } }))
  H.truthy(by_core:find("message 1 carries a group", 1, true), by_core)
  local duplicate = fails("LQ_DUPLICATE", broker:publish_many(tbl, {
    { payload = "a", dedup_key = "x" }, { payload = "b", dedup_key = "x" } }))
  H.truthy(duplicate:find('message 1: dedup key "x" is held by message 0 of this publish', 1, true), duplicate)
  eq(db:count("jobs"), 0, "rows")
end)

H.case("a field without a column fails with LQ_SCHEMA", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  fails("LQ_SCHEMA", broker:publish(tbl, "x", { headers = { a = "b" } }))
  fails("LQ_MISUSE", broker:publish(tbl, "x", { colour = "red" }))
  eq(db:count("jobs"), 0, "rows")
end)

H.case("wrong Lua types raise", function(db)
  local tbl = H.make_table("lease", { priority = "priority" })
  db:create(tbl)
  local broker = H.open(db)
  H.raises("string expected", broker.publish, broker, tbl, 42)
  H.eq(fails("LQ_MISUSE", broker:publish(tbl, "x", { priority = 1.5 })),
       "message 0: message field 'priority' takes an integer, got float")
  H.raises("libqueue.table expected", broker.publish, broker, "jobs", "x")
  H.raises("names and values are strings", broker.publish, broker, tbl, "x", { headers = { a = 1 } })
  -- A list with a hole: ipairs would stop at it and drop the rest.
  H.raises("list[2] of 2 is nil", broker.publish_many, broker, tbl, { "a", nil, "c" })
  H.raises("list[2]: string or table expected, got number", broker.publish_many, broker, tbl, { "a", 5 })
  H.raises("a list expected, found key x", broker.publish_many, broker, tbl, { "a", x = "b" })
  eq(db:count("jobs"), 0, "rows")
end)

H.case("groups filter subscriptions", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { group = "grp" })
  db:create(tbl)
  local broker = H.open(db)
  local g1 = ok(broker:publish_many(tbl, { { payload = "1", group = "g1" },
                                           { payload = "2", group = "g1" } }))
  local g2 = ok(broker:publish(tbl, "3", { group = "g2" }))
  local sub = H.subscribe(broker, tbl, { group = "g1" })
  local got = drain(sub)
  eq(#got, 2, "deliveries of g1")
  for _, d in ipairs(got) do
    eq(d.group, "g1", "group")
    H.truthy(d.id == g1[1] or d.id == g1[2], "id of g1")
  end
  local rows = db:query("SELECT id, grp FROM jobs")
  eq(#rows, 1, "rows left")
  eq(rows[1][1], tostring(g2), "row of g2")
  fails("LQ_MISUSE", broker:subscribe(tbl)) -- a group column needs a group
end)

H.case("headers round trip", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { headers = "headers" })
  db:create(tbl)
  local broker = H.open(db)
  local headers = { ["trace-id"] = "abc 123", empty = "", ['quote"d'] = 'va"lue\\',
                    ["ünï"] = "cödé" }
  ok(broker:publish(tbl, "x", { headers = headers }))
  ok(broker:publish(tbl, "none"))
  local sub = H.subscribe(broker, tbl)
  local got = drain(sub)
  eq(#got, 2, "deliveries")
  for _, d in ipairs(got) do
    local want = d.payload == "x" and headers or {}
    local n = 0
    for k, v in pairs(d.headers) do
      n = n + 1
      eq(v, want[k], "header " .. k)
    end
    local wanted = 0
    for _ in pairs(want) do wanted = wanted + 1 end
    eq(n, wanted, "header count")
  end
end)

H.case("a header is read by name", function(db)
  local tbl = H.make_table("lease", { headers = "headers" })
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "x", { headers = { a = "1" } }))
  local sub = H.subscribe(broker, tbl)
  local d = H.one(sub)
  eq(d:header("a"), "1", "header a")
  eq(d:header("b"), nil, "header b")
  local copy = d.headers
  copy.a = "changed"
  eq(d.headers.a, "1", "headers is a copy")
  ok(d:ack())
end)

H.case("partition keys round trip; none is nil", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { partition_key = "partition_key" })
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish_many(tbl, { { payload = "k", partition_key = "acct-7" }, "none" }))
  local sub = H.subscribe(broker, tbl)
  local keys = {}
  for _, d in ipairs(drain(sub)) do keys[d.payload] = d.partition_key or "nil" end
  eq(keys.k, "acct-7", "key")
  eq(keys.none, "nil", "no key")
end)

H.case("smaller priorities come first", { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { priority = "priority" })
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish_many(tbl, { { payload = "late", priority = 9 },
                                { payload = "first", priority = -5 },
                                { payload = "middle", priority = 0 } }))
  local sub = H.subscribe(broker, tbl) -- one worker: one claim at a time
  local order = {}
  for _, d in ipairs(drain(sub)) do order[#order + 1] = d.payload end
  H.same_list(order, { "first", "middle", "late" }, "order")
end)

H.case("a dedup key a queued row holds is refused, or gives that row's id",
       { forms = H.FORMS }, function(db, form)
  local tbl = H.make_table(form, { dedup_key = "dedup_key" })
  local broker = H.open(db)
  ok(broker:create_table(tbl))
  local first = ok(broker:publish(tbl, "a", { dedup_key = "k" }))
  local message = fails("LQ_DUPLICATE", broker:publish(tbl, "b", { dedup_key = "k" }))
  H.truthy(message:find('dedup key "k" is held by row', 1, true), "the message names the key")
  eq(ok(broker:publish(tbl, "c", { dedup_key = "k", on_duplicate = "existing" })), first,
     "the holder's id")
  fails("LQ_MISUSE", broker:publish(tbl, "d", { dedup_key = "k", on_duplicate = "skip" }))
  local sub = H.subscribe(broker, tbl)
  eq(#drain(sub), 1, "one row for the key")
  H.truthy(ok(broker:publish(tbl, "e", { dedup_key = "k" })) ~= first, "free after the ack")
end)

H.run()
