-- The module's surface: versions, enums, errors, table descriptions, handle
-- lifetimes and garbage collection in any order, and the raw core module.
local H = require("harness")
local libqueue = H.libqueue
local core = libqueue.core
local eq, ok, fails = H.eq, H.ok, H.fails

H.case("versions and status codes", function()
  H.truthy(libqueue.version:match("^%d+%.%d+%.%d+$"), "version " .. libqueue.version)
  eq(libqueue.header_version, libqueue.version, "header and library versions")
  eq(libqueue.status.LQ_LEASE_LOST, 12, "LQ_LEASE_LOST")
  eq(libqueue.status[12], "LQ_LEASE_LOST", "name of 12")
  eq(libqueue.status.LQ_OK, 0, "LQ_OK")
  eq(libqueue.roles.payload, core.LQ_ROLE_PAYLOAD, "role payload")
  eq(libqueue.roles.headers, core.LQ_ROLE_HEADERS, "role headers")
  eq(math.type(core.LQ_ROLE_PAYLOAD), "integer", "constants are integers")
  eq(libqueue.stats.extensions, core.LQ_STAT_EXTENSIONS, "stat")
  eq(libqueue.isolations.serializable, core.LQ_ISOLATION_SERIALIZABLE, "isolation")
end)

H.case("table descriptions", function()
  local lease = ok(libqueue.table{ name = "jobs", payload = "payload", locked_until = "lu" })
  eq(lease:form(), "lease", "lease form")
  local advisory = ok(libqueue.table("jobs", { advisory_lock = "acct-{account}" }))
  eq(advisory:form(), "advisory", "advisory form")
  eq(ok(libqueue.table{ name = "jobs" }):form(), "row_lock", "row lock form")
  H.truthy(lease:has("payload") and not lease:has("group"), "has")
  local sql = ok(lease:create_sql("sqlite"))
  H.truthy(sql:find("CREATE TABLE", 1, true) and sql:find('"lu"', 1, true), "create_sql: " .. sql)
  fails("LQ_DIALECT", lease:create_sql("oracle"))
  fails("LQ_MISUSE", libqueue.table{ name = "jobs", locked_untill = "x" })
  fails("LQ_MISUSE", libqueue.table{ name = "jobs", advisory_lock = "job-{id" })
  fails("LQ_MISUSE", libqueue.table{ name = "jobs", isolation = "bogus" })
  ok(libqueue.table{ name = "jobs", isolation = "read committed", schema = "app",
                     id = "job_id", id_generated = false, group = "g", fifo = true,
                     dead_letter = "dead", payload = "p", attempt = "a", locked_until = "l",
                     partition_key = "k", priority = "pr", retry_after = "r",
                     processed_at = "pa", headers = "h" })
  eq(fails("LQ_MISUSE", libqueue.table{ payload = "p" }), "table field 'name' takes a string, got nil")
  eq(fails("LQ_MISUSE", libqueue.table{ name = "jobs", payload = 3 }),
     "table field 'payload' takes a string, got integer")
  lease:close()
  lease:close() -- idempotent
  H.raises("closed", lease.create_sql, lease, "sqlite")
end)

H.case("loose option values are refused, naming the option and its type", function(db)
  local function refused(want, ...)
    eq(fails("LQ_MISUSE", ...), want)
  end
  refused("table field 'fifo' takes a boolean, got string", libqueue.table{ name = "jobs", fifo = "yes" })
  refused("table field 'id_generated' takes a boolean, got string",
          libqueue.table{ name = "jobs", id_generated = "x" })
  refused("table field 'dead_letter' takes a string, got integer",
          libqueue.table{ name = "jobs", dead_letter = 5 })
  refused("table field 'isolation' takes a string or an integer, got table",
          libqueue.table{ name = "jobs", isolation = {} })
  refused("table field 'schema' takes a string, got boolean", libqueue.table("jobs", { schema = true }))
  eq(ok(libqueue.table{ name = "jobs", fifo = true }).fifo, true, "fifo = true reads back")
  refused("option 'pool_size' takes an integer, got boolean", libqueue.open(db.url, { pool_size = true }))
  refused("option 'listen_url' takes a string, got integer", libqueue.open(db.url, { listen_url = 1 }))
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  refused("option 'workers' takes an integer, got boolean", broker:subscribe(tbl, { workers = true }))
  -- A flag takes a boolean as well as 0 or 1.
  ok(broker:subscribe(tbl, { transactional = false })):close()
  refused("schedule beat: option 'every_ms' takes an integer, got string",
          broker:schedule(tbl, "beat", { every_ms = "100" }))
  refused("create_table: option 'verify_only' takes a boolean, got string",
          broker:create_table(tbl, { verify_only = "yes" }))
  refused("dead_letters: option 'limit' takes an integer, got string", broker:dead_letters(tbl, { limit = "5" }))
  refused("message 0: message field 'group' takes a string, got integer", broker:publish(tbl, "x", { group = 1 }))
  refused("publish_sql: option 'notify' takes a boolean, got integer",
          broker:publish_sql(tbl, "x", { notify = 0 }))
  eq(db:count("jobs"), 0, "rows")
  broker:close()
end)

H.case("URLs are shown without their passwords", function()
  eq(libqueue.redact_url("postgresql://app:s3cret@db/jobs?sslpassword=k"),
     "postgresql://app:***@db/jobs?sslpassword=***", "redact_url")
  H.raises("string", libqueue.redact_url, 42)
end)

H.case("open: errors are nil, message, code", function(db)
  fails("LQ_DIALECT", libqueue.open("oracle://nowhere"))
  fails("LQ_MISUSE", libqueue.open(db.url, { pool_sise = 4 }))
  eq(fails("LQ_MISUSE", libqueue.open(db.url, { pool_size = "four" })),
     "option 'pool_size' takes an integer, got string")
  eq(fails("LQ_MISUSE", libqueue.open(db.url, { pool_size = 1.5 })),
     "option 'pool_size' takes an integer, got float")
  local broker = ok(libqueue.open(db.url, { pool_size = 2, acquire_timeout_ms = 5000.0 }))
  eq(broker.dialect, db.dialect, "dialect")
  broker:close()
end)

H.case("create_table: creates, reuses, and names what does not fit", function(db)
  local tbl = H.make_table("lease", { dead_letter = "jobs_dead" })
  local broker = H.open(db)
  local message = fails("LQ_SCHEMA", broker:create_table(tbl, { verify_only = true }))
  H.truthy(message:find("does not exist", 1, true), message)
  eq(ok(broker:create_table(tbl)), true, "create_table")
  eq(ok(broker:create_table(tbl, { verify_only = true })), true, "verify_only after")
  ok(broker:publish_many(tbl, { "a", "b" }))
  eq(db:count("jobs"), 2, "rows published")
  eq(db:count("jobs_dead"), 0, "the dead-letter table exists")
  local wider = H.make_table("lease", { priority = "prio" })
  message = fails("LQ_SCHEMA", broker:create_table(wider))
  H.truthy(message:find('column "prio" (priority) is missing', 1, true), message)
  fails("LQ_MISUSE", broker:create_table(tbl, { verify = true }))
  local sub = H.subscribe(broker, tbl)
  fails("LQ_MISUSE", sub:next(-1))
  fails("LQ_MISUSE", sub:next(0 / 0))
  eq(sub:health(), true, "health while claims work")
  sub:close()
  H.raises("libqueue.table", broker.create_table, broker, "jobs")
  broker:close()
  fails("LQ_CLOSED", broker:create_table(tbl))
end)

H.case("subscribe: schema errors name what is missing", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  local message = fails("LQ_SCHEMA", broker:subscribe(H.make_table("lease", { name = "nope" })))
  H.truthy(message:find("nope", 1, true), "message names the table: " .. message)
  message = fails("LQ_SCHEMA", broker:subscribe(H.make_table("lease", { payload = "body" })))
  H.truthy(message:find("body", 1, true), "message names the column: " .. message)
  local row_lock = ok(libqueue.table{ name = "jobs", payload = "payload" })
  if db.dialect == "sqlite" then -- no row locks: said before a subscription, and at its open
    local said = fails("LQ_DIALECT", row_lock:check_form(db.dialect))
    H.eq(fails("LQ_DIALECT", broker:subscribe(row_lock)), "subscription to jobs: " .. said)
  else
    H.eq(row_lock:check_form(db.dialect), true)
  end
  fails("LQ_MISUSE", broker:subscribe(tbl, { wokers = 1 }))
  -- An option another call reads is refused, naming that call.
  message = fails("LQ_MISUSE", broker:subscribe(tbl, { listen_notify = 1 }))
  H.truthy(message:find("listen_notify belongs to open, not to subscribe", 1, true), message)
  message = fails("LQ_MISUSE", libqueue.open(db.url, { workers = 4 }))
  H.truthy(message:find("workers belongs to subscribe, not to open", 1, true), message)
  -- A value out of range: the core's message, once.
  message = fails("LQ_MISUSE", broker:subscribe(tbl, { workers = 0 }))
  H.eq(message, "option workers must be between 1 and 4096, not 0")
  eq(fails("LQ_MISUSE", broker:subscribe(tbl, { group = 5 })), "option 'group' takes a string, got integer")
  H.raises("unknown stat", function()
    local sub = H.subscribe(broker, tbl)
    return sub:stat("bogus")
  end)
end)

H.case("a closed broker refuses work; its subscriptions go on", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  eq(broker:close(), true, "close")
  eq(broker:close(), true, "close again")
  fails("LQ_CLOSED", broker:publish(tbl, "y"))
  fails("LQ_CLOSED", broker:subscribe(tbl))
  local d = H.one(sub) -- the subscription keeps the pool alive
  ok(d:ack())
  eq(db:count("jobs"), 0, "rows left")
end)

H.case("handles are freed once, by close or the collector, in any order", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local function setup(n)
    local broker = H.open(db)
    local payloads = {}
    for i = 1, n do payloads[i] = tostring(i) end
    ok(broker:publish_many(tbl, payloads))
    local sub = H.subscribe(broker, tbl, { workers = 2 })
    return broker, sub, H.one(sub)
  end
  -- 1. Parents closed first, then the delivery is still usable.
  local broker, sub, d = setup(1)
  broker:close()
  sub:close()
  ok(d:ack())
  d:release()
  -- 2. Everything dropped at once: the collector frees them in its own order.
  broker, sub, d = setup(2)
  broker, sub, d = nil, nil, nil
  collectgarbage("collect")
  collectgarbage("collect")
  -- The unsettled delivery went back: both rows are free.
  eq(db:count("jobs", "locked_until IS NOT NULL"), 0, "rows claimed after collection")
  -- 3. Closed explicitly, then collected: no double free.
  broker, sub, d = setup(1)
  d:release(); sub:close(); broker:close(); tbl:close()
  broker, sub, d = nil, nil, nil
  collectgarbage("collect")
  -- 4. Only the broker dropped: the subscription keeps working.
  tbl = H.make_table("lease")
  broker, sub, d = setup(1)
  d:release()
  broker = nil
  collectgarbage("collect")
  local n = 0
  for delivery in sub:deliveries(0.5) do
    n = n + 1
    ok(delivery:ack())
  end
  H.truthy(n >= 1, "deliveries after the broker was collected")
  sub:close() -- else it claims the next row ahead of the next subscription
  -- 5. Only the subscription dropped while its delivery is held.
  broker = H.open(db)
  ok(broker:publish(tbl, "last"))
  sub = H.subscribe(broker, tbl)
  d = H.one(sub)
  sub = nil
  collectgarbage("collect")
  ok(d:ack())
  d = nil
  collectgarbage("collect")
  eq(db:count("jobs"), 0, "rows left")
end)

-- Lua 5.4 only; compiled from a string, which older Luas cannot parse.
if H.CLOSE then
  local close_case = assert(load([[
    local H, db = ...
    local tbl = H.make_table("lease")
    db:create(tbl)
    do
      local broker <close> = H.open(db)
      H.ok(broker:publish(tbl, "x"))
      local sub <close> = H.subscribe(broker, tbl)
      local d <close> = H.one(sub)
      H.ok(d:ack())
    end
    H.eq(db:count("jobs"), 0, "rows left")
  ]]))
  H.case("to-be-closed variables close handles", function(db) close_case(H, db) end)
end

H.case("a statement's error carries its SQLSTATE, from publish and stats alike", function(db)
  local broker = H.open(db)
  local missing = H.make_table("lease", { name = "never_made" })
  local none, _, code, sqlstate, native = broker:publish(missing, "x")
  eq(none, nil, "publish to a missing table")
  eq(code, "LQ_SCHEMA", "publish's code")
  local stats_none, _, stats_code, stats_sqlstate, stats_native = broker:stats(missing)
  eq(stats_none, nil, "stats of a missing table")
  eq(stats_code, code, "stats' code")
  eq(stats_sqlstate, sqlstate, "stats' SQLSTATE")
  eq(stats_native, native, "stats' native code")
  if db.dialect ~= "sqlite" then H.truthy(#sqlstate == 5, "a SQLSTATE: " .. tostring(sqlstate)) end
  broker:close()
end)

H.case("the raw core: out values, status returns, bytes", function(db)
  local tbl = H.make_table("lease", { headers = "headers" })
  db:create(tbl)
  local option, kind = core.lq_option_find("poll_interval_ms")
  eq(option, core.LQ_OPT_POLL_INTERVAL_MS, "option")
  eq(kind, core.LQ_OPTION_INT, "type")
  local none, message, code, sqlstate, native = core.lq_option_find("nope")
  eq(none, nil, "unknown option")
  eq(code, "LQ_MISUSE", "code")
  H.truthy(message:find("nope", 1, true), "message")
  eq(sqlstate, "", "sqlstate")
  eq(native, 0, "native")
  local broker = ok(core.lq_broker_open(db.url, nil))
  local msg = ok(core.lq_message_new())
  eq(core.lq_message_set_payload(msg, "a\0b"), true, "a status function returns true")
  ok(core.lq_message_set_header(msg, "k", "v"))
  local ids = ok(core.lq_publish(broker, tbl._ptr, { msg, msg }))
  eq(#ids, 2, "ids")
  H.raises("not an lq_message", core.lq_publish, broker, tbl._ptr, { msg, "x" })
  H.raises("int64_t", core.lq_message_set_priority, msg, 1.5)
  H.raises("range", core.lq_options_set_int, nil, 2 ^ 40, 1)
  core.lq_message_free(msg)
  local sub = ok(core.lq_subscription_open(broker, tbl._ptr, nil))
  local d = ok(core.lq_subscription_next(sub, 5000))
  eq(core.lq_delivery_payload(d), "a\0b", "payload with a NUL")
  eq(core.lq_delivery_payload_size(d), 3, "payload size")
  eq(core.lq_delivery_header_count(d), 1, "header count")
  local name, value = core.lq_delivery_header_at(d, 0)
  eq(name, "k", "header name")
  eq(value, "v", "header value")
  fails("LQ_MISUSE", core.lq_delivery_header_at(d, 1))
  eq(core.lq_delivery_ack(d), true, "ack")
  core.lq_delivery_free(d)
  d = ok(core.lq_subscription_next(sub, 5000)) -- the same message, published twice
  eq(core.lq_delivery_payload(d), "a\0b", "payload of the second")
  ok(core.lq_delivery_ack(d))
  core.lq_delivery_free(d)
  local timeout = { core.lq_subscription_next(sub, 0) }
  eq(timeout[1], nil, "next on an empty queue")
  eq(timeout[3], "LQ_TIMEOUT", "code")
  core.lq_subscription_close(sub)
  core.lq_broker_close(broker)
  eq(core.lq_subscription_run, nil, "push mode is not exposed")
  eq(core.lq_set_log, nil, "lq_set_log is not exposed")
  eq(core.lq_free, nil, "lq_free is not exposed")
end)

H.case("the log: levels, a failing logger, and handing it back to the core", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  ok(broker:publish(tbl, "x"))
  local sub = H.subscribe(broker, tbl)
  -- Above the level: nothing.
  local log = H.capture_log(function()
    local d = H.one(sub)
    ok(d:retry_after(1000)) -- a warning: no retry_after column
    d:release()
  end, "error")
  eq(#log, 0, "messages above the level")
  -- A logger that fails does not break the binding.
  libqueue.set_logger(function() error("logger broke") end)
  local d = H.one(sub)
  ok(d:retry_after(1000))
  d:release()
  libqueue.set_logger(nil)
  -- Handed back: the core writes to stderr itself; nothing reaches Lua.
  ok(libqueue.set_logger(false))
  d = H.one(sub)
  ok(d:retry_after(1000))
  d:release()
  eq(core.lq_lua_log_drain(), nil, "nothing queued once handed back")
  ok(libqueue.set_logger(nil))
  d = H.one(sub)
  ok(d:ack())
  H.raises("unknown log level", libqueue.set_logger, print, "loud")
end)

H.run()
