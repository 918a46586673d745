-- publish_sql: the insert rendered for a driver of the caller's own, its
-- text, values and types on each dialect; on SQLite run through LuaSQL
-- (Debian's lua-sql-sqlite3) in the caller's transaction and claimed.
local H = require("harness")
local libqueue = H.libqueue
local eq, ok, fails = H.eq, H.ok, H.fails

local function jobs(name)
  return ok(libqueue.table{ name = name or "jobs", payload = "pay?load", attempt = "attempt",
                            locked_until = "locked_until", priority = "prio%s",
                            headers = "headers", dedup_key = "dedup", retry_after = "retry_after" })
end

H.case("publish_sql renders text, values and types for each dialect", function()
  local tbl = jobs('we"i`rd ?$1')
  local sql, values, info = ok(libqueue.publish_sql("postgresql", tbl, "p\0y",
                                                    { priority = 4, headers = { a = "b" } }))
  eq(sql, 'WITH "lq_ins" AS (INSERT INTO "we""i`rd ?$1" ("attempt", "pay?load", "prio%s", '
          .. '"retry_after", "headers", "dedup") VALUES (1, $1, $2, $3, $4, $5) RETURNING "id") '
          .. 'SELECT "lq_ins"."id", pg_notify($6, COALESCE($7, \'\')) FROM "lq_ins"', "pg sql")
  eq(values.n, 7, "pg values")
  eq(values[1], "p\0y", "payload")
  eq(values[2], 4, "priority")
  eq(values[4], '{"a":"b"}', "headers")
  eq(values[5], nil, "no dedup key")
  eq(values[6], 'we"i`rd ?$1', "channel")
  H.same_list(info.types, { "bytes", "int64", "text", "text", "null", "text", "null" }, "types")
  eq(info.returns_id, true, "returns the id")
  for i, at in ipairs(info.offsets) do eq(sql:sub(at, at + #tostring(i)), "$" .. i, "offset") end

  sql = ok(libqueue.publish_sql("postgresql", tbl, "x", { notify = false }))
  eq(sql:find("pg_notify", 1, true), nil, "no wake-up")

  sql, values, info = ok(libqueue.publish_sql("mysql", tbl, "x"))
  eq(sql, "INSERT INTO `we\"i``rd ?$1` (`attempt`, `pay?load`, `prio%s`, `retry_after`, `headers`, "
          .. "`dedup`) VALUES (1, ?, ?, ?, ?, ?)", "mysql sql")
  eq(info.returns_id, false, "mysql: the driver's last insert id")
  H.truthy(values[3]:match("^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d%.%d+$"), "DATETIME text")

  fails("LQ_DIALECT", libqueue.publish_sql("oracle", tbl, "x"))
  fails("LQ_SCHEMA", libqueue.publish_sql("sqlite", tbl, "x", { group = "g" }))
  fails("LQ_MISUSE", libqueue.publish_sql("sqlite", tbl, "x",
                                          { dedup_key = "k", on_duplicate = "existing" }))
  H.raises("bad argument #1 to 'publish_sql'", libqueue.publish_sql, nil, tbl, "x")
end)

--- The statement with each value written in as a literal of its type, as
-- a driver without parameters (LuaSQL) needs: each placeholder replaced at
-- its offset, back to front.
local function inline(conn, sql, values, info)
  for i = values.n, 1, -1 do
    local v, kind, literal = values[i], info.types[i], nil
    if kind == "null" then
      literal = "NULL"
    elseif kind == "int64" or kind == "double" then
      literal = tostring(v)
    elseif kind == "bytes" then
      literal = "X'" .. v:gsub(".", function(c) return string.format("%02x", c:byte()) end) .. "'"
    else
      literal = "'" .. conn:escape(v) .. "'"
    end
    sql = sql:sub(1, info.offsets[i] - 1) .. literal .. sql:sub(info.offsets[i] + 1)
  end
  return sql
end

H.case("the rendered insert runs through LuaSQL in the caller's transaction", function(db)
  if db.dialect ~= "sqlite" then return end
  local luasql = require("luasql.sqlite3")
  local tbl = jobs('we"i`rd ?%s')
  local broker = H.open(db)
  ok(broker:create_table(tbl))
  local env = assert(luasql.sqlite3())
  local conn = assert(env:connect(db.path))
  assert(conn:setautocommit(false))
  local function publish(payload, opts)
    -- LuaSQL steps a statement that returns rows twice: no RETURNING.
    local fields = { returning = false }
    for k, v in pairs(opts or {}) do fields[k] = v end
    local sql, values, info = ok(broker:publish_sql(tbl, payload, fields))
    eq(info.returns_id, false, "no RETURNING")
    local changed, err = conn:execute(inline(conn, sql, values, info))
    if not changed then return nil, err end
    eq(changed, 1, "rows written")
    return math.tointeger(conn:getlastautoid())
  end
  H.truthy(publish("rolled back"), "an id")
  assert(conn:rollback())
  eq(db:count('we"i`rd ?%s'), 0, "rolled back")
  local id = H.ok(publish("bin\0\255", { priority = 2, headers = { trace = "it's" },
                                          dedup_key = "once" }))
  assert(conn:commit())
  local again, err = publish("twice", { dedup_key = "once" })
  eq(again, nil, "a held key")
  H.truthy(tostring(err):find("UNIQUE", 1, true), "the unique index refuses it: " .. tostring(err))
  assert(conn:rollback())
  conn:close()
  env:close()

  local sub = H.subscribe(broker, tbl)
  local d = H.one(sub)
  eq(d.id, id, "id")
  eq(d.payload, "bin\0\255", "payload")
  eq(d.headers.trace, "it's", "header")
  ok(d:ack())
  H.none(sub, 0.2, "nothing else")
end)

H.run()
