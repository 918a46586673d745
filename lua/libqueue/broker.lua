--- libqueue.broker: Broker, a connection pool on a database URL
-- (libqueue.open): create_table, publishing (the messages a publish writes,
-- built from Lua fields) and subscribe; and redact_url.

local C = require("libqueue.base")
C.internal()
local log = require("libqueue.log")
local build_options = require("libqueue.options").build_options
local table_ptr = require("libqueue.table").table_ptr
local new_subscription = require("libqueue.subscription").new

local core = C.core
local raise, argerror, check_type, misuse, closed, own, check_fields =
      C.raise, C.argerror, C.check_type, C.misuse, C.closed, C.own, C.check_fields
local drain_log, done = log.drain_log, log.done

local type, pairs, ipairs, setmetatable, tostring, assert =
      type, pairs, ipairs, setmetatable, tostring, assert
local math_type, tointeger, new_object = C.math_type, C.tointeger, C.new_object
local format = string.format

local B = {}

local Broker = {}
Broker.__index = Broker
Broker.__name = "libqueue.broker"
B.Broker = Broker

--- The URL as it may be shown: the password of its user info and of its
-- password, sslpassword and tls_passphrase parameters as "***".
local function redact_url(url)
  check_type(url, "string", 1, "redact_url")
  return assert(core.lq_redact_url(url))
end
B.redact_url = redact_url

--- Opens a broker on a URL ("sqlite:///abs/path.db", "sqlite:relative.db").
-- Options by name: pool_size, connect_timeout_ms, statement_timeout_ms,
-- acquire_timeout_ms, connection_limit, listen_notify, pgbouncer, listen_url (see libqueue.h).
-- Returns the broker, or nil, message, code.
function B.open(url, opts)
  check_type(url, "string", 1, "open")
  local ok, options, code = build_options(opts, "open")
  if not ok then return nil, options, code end
  local ptr, msg, code2, sqlstate, native = core.lq_broker_open(url, options and options.ptr)
  if options then options:free() end
  drain_log()
  if not ptr then return nil, msg, code2, sqlstate, native end
  -- Only the URL as it may be shown is kept: its password is "***".
  return new_object({ _ptr = ptr, url = redact_url(url), dialect = core.lq_broker_dialect(ptr) },
                      Broker)
end

--- Closes the broker (idempotent): no new publishes or subscriptions; open
-- subscriptions go on until they are closed.
function Broker:close()
  local ptr = self._ptr
  if ptr then
    self._ptr = nil
    core.lq_broker_close(ptr)
  end
  return true
end
Broker.__gc = Broker.close
Broker.__close = Broker.close
function Broker:__tostring()
  return format("libqueue.broker(%s%s)", self.url, self._ptr and "" or ", closed")
end

--- Makes the database ready for a table: creates it, its claim-order index
-- and its dead-letter table when missing, then checks that every column the
-- description names exists with a fitting type. Safe at every start, from
-- several processes at once. opts: verify_only (create nothing; a missing
-- table fails too). Returns true, or nil, message, code ("LQ_SCHEMA" names
-- each column missing or of the wrong type; nothing is changed).
function Broker:create_table(tbl, opts)
  local tptr = table_ptr(tbl, 1, "create_table")
  local flags = 0
  if opts ~= nil then
    check_type(opts, "table", 2, "create_table")
    for k in pairs(opts) do
      if k ~= "verify_only" then return misuse(format("create_table: unknown option '%s'", tostring(k))) end
    end
    local fits, m, c = check_fields(opts, { verify_only = "boolean" }, "create_table: option")
    if not fits then return nil, m, c end
    if opts.verify_only then flags = core.LQ_CREATE_VERIFY_ONLY end
  end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, core.lq_table_create(ptr, tptr, flags))
end

---------------------------------------------------------------------------
-- Publishing

-- Each message field and the Lua type it takes (C.check_fields).
local MESSAGE_FIELDS = { payload = "string", id = "integer", group = "string",
                         partition_key = "string", priority = "integer", delay_ms = "integer",
                         headers = "table", dedup_key = "string", on_duplicate = "string",
                         expires_in_ms = "integer" }
local ON_DUPLICATE = { refuse = 0, existing = 1 }

--- An Owned lq_message with `fields` set, or nil, message, code.
local function build_message(tbl, fields)
  for key in pairs(fields) do
    if not MESSAGE_FIELDS[key] then
      return misuse(format("unknown message field '%s'", tostring(key)))
    end
  end
  local fits, m0, c0 = check_fields(fields, MESSAGE_FIELDS, "message field")
  if not fits then return nil, m0, c0 end
  local ptr, msg, code = core.lq_message_new()
  if not ptr then return nil, msg, code end
  local message = own(ptr, core.lq_message_free)
  local function set(fn, ...)
    local ok, m, c, s, n = fn(ptr, ...)
    if not ok then
      message:free()
      return nil, m, c, s, n
    end
    return true
  end
  local ok, m, c, s, n = true, nil, nil, nil, nil
  local payload = fields.payload
  if payload ~= nil then
    -- An empty payload is written only to a table with a payload column, so
    -- a table without one takes publish(tbl) or publish(tbl, "").
    if #payload > 0 or tbl.columns.payload then
      ok, m, c, s, n = set(core.lq_message_set_payload, payload)
    end
  end
  if ok and fields.id ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_id, tointeger(fields.id))
  end
  if ok and fields.group ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_group, fields.group)
  end
  if ok and fields.partition_key ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_partition_key,
                         fields.partition_key)
  end
  if ok and fields.priority ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_priority, tointeger(fields.priority))
  end
  if ok and fields.delay_ms ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_delay_ms, tointeger(fields.delay_ms))
  end
  if ok and fields.expires_in_ms ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_expires_in_ms,
                         tointeger(fields.expires_in_ms))
  end
  if ok and fields.dedup_key ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_dedup_key, fields.dedup_key)
  end
  if ok and fields.on_duplicate ~= nil then
    local policy = ON_DUPLICATE[fields.on_duplicate]
    if not policy then
      message:free()
      return misuse(format("message field 'on_duplicate' is 'refuse' or 'existing', not %s",
                           tostring(fields.on_duplicate)))
    end
    ok, m, c, s, n = set(core.lq_message_set_on_duplicate, policy)
  end
  if ok and fields.headers ~= nil then
    for name, value in pairs(fields.headers) do
      if type(name) ~= "string" or type(value) ~= "string" then
        message:free()
        raise(format("header %s: names and values are strings", tostring(name)))
      end
      ok, m, c, s, n = set(core.lq_message_set_header, name, value)
      if not ok then break end
    end
  end
  if not ok then return nil, m, c, s, n end
  return message
end

local function publish(self, tbl, batch, fname)
  local tptr = table_ptr(tbl, 1, fname)
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  local messages, pointers = {}, {}
  local function free_all()
    for _, message in ipairs(messages) do message:free() end
  end
  for i, fields in ipairs(batch) do
    local message, m, c, s, n = build_message(tbl, fields)
    if not message then
      free_all()
      -- Counted from 0, as the core's errors of the same publish count them.
      return nil, format("message %d: %s", i - 1, m), c, s, n
    end
    messages[i] = message
    pointers[i] = message.ptr
  end
  local ids, m, c, s, n = core.lq_publish(ptr, tptr, pointers)
  free_all()
  drain_log()
  if not ids then return nil, m, c, s, n end
  return ids
end

--- Writes one message; returns its id (an integer), or nil, message, code.
-- payload: a string (bytes; NULs allowed), "" when nil. opts: group,
-- partition_key, priority, delay_ms, headers ({name = value}), id (when the
-- table's ids are not generated), dedup_key and on_duplicate ("refuse", the
-- default: nil, msg, "LQ_DUPLICATE" while a row queued or in work holds the
-- key; "existing": that row's id, nothing written). A field the table has no
-- column for fails with LQ_SCHEMA and writes nothing.
function Broker:publish(tbl, payload, opts)
  local fields = {}
  if opts ~= nil then
    check_type(opts, "table", 3, "publish")
    for k, v in pairs(opts) do fields[k] = v end
    if fields.payload ~= nil then return misuse("the payload is publish's second argument") end
  end
  if payload ~= nil and type(payload) ~= "string" then argerror(2, "publish", "string", payload) end
  fields.payload = payload or ""
  local ids, m, c, s, n = publish(self, tbl, { fields }, "publish")
  if not ids then return nil, m, c, s, n end
  return ids[1]
end

---------------------------------------------------------------------------
-- Publishing with a driver of the caller's own (lq_publish_sql)

local SQL_TYPES = { [core.LQ_SQL_NULL] = "null", [core.LQ_SQL_INT64] = "int64",
                    [core.LQ_SQL_DOUBLE] = "double", [core.LQ_SQL_TEXT] = "text",
                    [core.LQ_SQL_BYTES] = "bytes" }

--- The insert of one message rendered for `dialect` ("postgresql", "mysql",
-- "sqlite"), to run on a connection of the caller's own (pgmoon,
-- lua-resty-mysql, LuaSQL, ...) in its own transaction. Returns
--     sql, values, info
-- sql: the text, with $1, $2, .. on PostgreSQL and ? on MySQL and SQLite;
-- values: one per placeholder, in order, with values.n (nil is SQL NULL);
-- info: { types = {"bytes", "text", "int64", "null", ..}, offsets = {byte
-- position of each placeholder, from 1}, returns_id = true when the
-- statement returns the new id as its one row (else read the driver's last
-- insert id, MySQL) }. Values are never spliced into sql: a driver without
-- parameters escapes each by its type (bytes as a blob literal). Times are
-- text on this host's clock now (UTC): run it soon. opts: publish's fields,
-- notify = false to leave out PostgreSQL's pg_notify wake-up, returning =
-- false for no RETURNING on SQLite (LuaSQL runs a statement that returns
-- rows twice; read conn:getlastautoid() instead). A dedup key
-- a row holds fails the insert with the driver's unique violation. Or nil,
-- message, code.
local function publish_sql(dialect, tbl, payload, opts, fname, first)
  check_type(dialect, "string", first, fname)
  local tptr = table_ptr(tbl, first + 1, fname)
  local fields, flags = {}, 0
  if opts ~= nil then
    check_type(opts, "table", first + 3, fname)
    for k, v in pairs(opts) do fields[k] = v end
    if fields.payload ~= nil then return misuse("the payload is " .. fname .. "'s own argument") end
    -- Two distinct bits, each added once (Lua 5.1 has no "|").
    local fits, m, c = check_fields(fields, { notify = "boolean", returning = "boolean" },
                                    fname .. ": option")
    if not fits then return nil, m, c end
    if fields.notify == false then flags = flags + core.LQ_PUBLISH_SQL_NO_NOTIFY end
    if fields.returning == false then flags = flags + core.LQ_PUBLISH_SQL_NO_RETURNING end
    fields.notify, fields.returning = nil, nil
  end
  if payload ~= nil and type(payload) ~= "string" then argerror(first + 2, fname, "string", payload) end
  fields.payload = payload or ""
  local message, m, c, s, n = build_message(tbl, fields)
  if not message then return nil, m, c, s, n end
  local r
  r, m, c, s, n = core.lq_publish_sql(dialect, tptr, message.ptr, flags)
  message:free()
  drain_log()
  if not r then return nil, m, c, s, n end
  local count = core.lq_rendered_sql_param_count(r)
  local values, types, offsets = { n = count }, {}, {}
  for i = 0, count - 1 do
    local kind = core.lq_rendered_sql_param_type(r, i)
    types[i + 1] = SQL_TYPES[kind]
    offsets[i + 1] = core.lq_rendered_sql_param_offset(r, i) + 1
    if kind == core.LQ_SQL_INT64 then
      values[i + 1] = core.lq_rendered_sql_param_int64(r, i)
    elseif kind == core.LQ_SQL_DOUBLE then
      values[i + 1] = core.lq_rendered_sql_param_double(r, i)
    elseif kind ~= core.LQ_SQL_NULL then
      values[i + 1] = core.lq_rendered_sql_param_data(r, i)
    end
  end
  local sql, returns_id = core.lq_rendered_sql_text(r), core.lq_rendered_sql_returns_id(r)
  core.lq_rendered_sql_free(r)
  return sql, values, { types = types, offsets = offsets, returns_id = returns_id }
end

--- libqueue.publish_sql(dialect, tbl, payload, opts): see above.
function B.publish_sql(dialect, tbl, payload, opts)
  return publish_sql(dialect, tbl, payload, opts, "publish_sql", 1)
end

--- broker:publish_sql(tbl, payload, opts): for the broker's own database.
function Broker:publish_sql(tbl, payload, opts)
  return publish_sql(self.dialect, tbl, payload, opts, "publish_sql", 0)
end

--- Writes many messages in one transaction (all or none); returns their ids
-- in order. Each message is a payload string or a table of publish's fields
-- with `payload` ({ payload = "..", group = "g" }).
function Broker:publish_many(tbl, list)
  check_type(list, "table", 2, "publish_many")
  -- A list, every key 1..n: ipairs would stop at a hole and drop the rest.
  local count = 0
  for key in pairs(list) do
    if math_type(key) ~= "integer" or key < 1 then
      raise(format("bad argument #2 to 'publish_many' (a list expected, found key %s)",
                   tostring(key)))
    end
    count = count + 1
  end
  local batch = {}
  for i = 1, count do
    local message = list[i]
    if message == nil then
      raise(format("bad argument #2 to 'publish_many' (a list without holes expected, "
                   .. "list[%d] of %d is nil)", i, count))
    elseif type(message) == "string" then
      batch[i] = { payload = message }
    elseif type(message) == "table" then
      batch[i] = message
    else
      raise(format("bad argument #2 to 'publish_many' (list[%d]: string or table expected, got %s)",
                   i, type(message)))
    end
  end
  if #batch == 0 then table_ptr(tbl, 1, "publish_many"); return {} end
  return publish(self, tbl, batch, "publish_many")
end

--- Takes row `id` out of its queue: into the dead letters where the table
-- declares them, else deleted. Returns true, or nil, message, code:
-- "LQ_NOT_FOUND" when no row of the id is queued or in work, "LQ_TIMEOUT"
-- when a row lock run's process did not take the cancel within 5 s (nothing
-- changed). A row in work is cancelled in every form: its settlement fails
-- with "LQ_CANCELLED", and d:cancelled() tells its run (a lease's run at
-- once where the cancel is heard of, else at its next extension).
function Broker:cancel(tbl, id)
  local tptr = table_ptr(tbl, 1, "cancel")
  if math_type(id) ~= "integer" then argerror(2, "cancel", "integer", id) end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, core.lq_cancel(ptr, tptr, id))
end

---------------------------------------------------------------------------
-- Looking at a queue

local ATTEMPT_BUCKETS, DEFAULT_CAP = 10, 100000

--- A snapshot of the queue of `tbl`: a table of due, delayed, in_work (nil
-- in the row lock and advisory forms), dead_letters (nil without a
-- destination), head_age_ms (nil when no row is due) and, with an attempt
-- column, attempts ({ [attempt] = rows }, the last bucket counting 9 or
-- more). opts: group (a table with a group column needs it) and cap (the
-- most rows a count reads, 100000). Or nil, message, code.
function Broker:stats(tbl, opts)
  local tptr = table_ptr(tbl, 1, "stats")
  local group, cap = nil, DEFAULT_CAP
  if opts ~= nil then
    check_type(opts, "table", 2, "stats")
    for k in pairs(opts) do
      if k ~= "group" and k ~= "cap" then return misuse(format("stats: unknown option '%s'", tostring(k))) end
    end
    local fits, m, c = check_fields(opts, { group = "string", cap = "integer" }, "stats: option")
    if not fits then return nil, m, c end
    group, cap = opts.group, tointeger(opts.cap or cap)
  end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  local v, msg, code, sqlstate, native = core.lq_queue_stats(ptr, tptr, group, cap)
  if not v then return done(nil, nil, msg, code, sqlstate, native) end
  local function known(x) if x >= 0 then return x end end
  local stats = { due = v[core.LQ_QUEUE_DUE + 1], delayed = v[core.LQ_QUEUE_DELAYED + 1],
                  in_work = known(v[core.LQ_QUEUE_IN_WORK + 1]),
                  dead_letters = known(v[core.LQ_QUEUE_DEAD_LETTERS + 1]),
                  head_age_ms = known(v[core.LQ_QUEUE_HEAD_AGE_MS + 1]) }
  if tbl:has("attempt") then
    local counts
    counts, msg, code, sqlstate, native = core.lq_queue_attempts(ATTEMPT_BUCKETS, ptr, tptr, group, cap)
    if not counts then return done(nil, nil, msg, code, sqlstate, native) end
    stats.attempts = {}
    for i, n in ipairs(counts) do
      if n > 0 then stats.attempts[i - 1] = n end
    end
  end
  return done(nil, stats)
end

local GROUP_OPTION = { group = "string" }

-- A pause's call, with the group of its opts ({group = name} or nil).
local function control(self, what, call, tbl, opts)
  local tptr = table_ptr(tbl, 1, what)
  local group
  if opts ~= nil then
    check_type(opts, "table", 2, what)
    for k in pairs(opts) do
      if k ~= "group" then return misuse(format("%s: unknown option '%s'", what, tostring(k))) end
    end
    local fits, m, c = check_fields(opts, GROUP_OPTION, what .. ": option")
    if not fits then return nil, m, c end
    group = opts.group
  end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, call(ptr, tptr, group))
end

--- Pauses the queue of `tbl` (opts.group: one group of it; none: every
-- group) in every process: its subscriptions claim nothing until resume,
-- deliveries in work finish. Each subscription sees it within a poll
-- interval, at once in this broker. Returns true, or nil, message, code.
function Broker:pause(tbl, opts) return control(self, "pause", core.lq_queue_pause, tbl, opts) end

--- Ends a pause of `tbl` (or of opts.group) as pause named it.
function Broker:resume(tbl, opts) return control(self, "resume", core.lq_queue_resume, tbl, opts) end

--- Whether the claims of `tbl` (of opts.group) are paused now, by a pause of
-- their own or of the whole table. Or nil, message, code.
function Broker:paused(tbl, opts) return control(self, "paused", core.lq_queue_paused, tbl, opts) end

--- The table's health from the database's own statistics (lq_doctor): JSON
-- text of {dialect, table, findings = [{check, level, value, message,
-- advice}, ...]}, level "ok", "warning" or "problem". Or nil, message, code.
function Broker:doctor(tbl)
  local tptr = table_ptr(tbl, 1, "doctor")
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, core.lq_doctor(ptr, tptr))
end

---------------------------------------------------------------------------
-- Dead letters

-- The opts of a dead-letter or prune call, whose fields `known` gives with
-- their types: opts ({} for nil), or nil, message, code.
local function dead_letter_options(opts, fname, known)
  if opts == nil then return {} end
  check_type(opts, "table", 3, fname)
  for k in pairs(opts) do
    if not known[k] then raise(format("%s: unknown option '%s'", fname, tostring(k))) end
  end
  local fits, m, c = check_fields(opts, known, fname .. ": option")
  if not fits then return nil, m, c end
  return opts
end

--- Up to opts.limit (20) dead letters of ids above opts.after (0), as the
-- JSON text of an array of rows (id, attempt, payload or payload_base64, ...);
-- opts.group where the table has groups. Or nil, message, code.
function Broker:dead_letters(tbl, opts)
  local tptr = table_ptr(tbl, 1, "dead_letters")
  local o, m, c = dead_letter_options(opts, "dead_letters",
                                      { group = "string", after = "integer", limit = "integer" })
  if not o then return nil, m, c end
  local after, limit = tointeger(o.after or 0), tointeger(o.limit or 20)
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, core.lq_dead_letters_list(ptr, tptr, o.group, after, limit))
end

local function move_dead_letters(self, tbl, ids, opts, fname, c_move)
  local tptr = table_ptr(tbl, 1, fname)
  local o, m, c = dead_letter_options(opts, fname, GROUP_OPTION)
  if not o then return nil, m, c end
  if ids ~= nil then
    check_type(ids, "table", 2, fname)
    -- Checked here, so that a bad id is the module's argument error, raised
    -- at the caller's line, and not the C wrapper's.
    local list = {}
    for i = 1, #ids do
      list[i] = type(ids[i]) == "number" and tointeger(ids[i]) or nil
      if not list[i] then
        raise(format("bad argument #2 to '%s' (a list of integer ids expected, ids[%d] is %s)",
                     fname, i, math_type(ids[i]) or type(ids[i])))
      end
    end
    ids = list
  end
  if ids ~= nil and #ids == 0 then return 0 end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, c_move(ptr, tptr, o.group, ids))
end

--- Puts the dead letters of `ids` (a list, or nil for every one) back in
-- the queue, due now and counted from their first attempt again; returns how
-- many went back. opts.group: the group to replay into, where the table has
-- groups.
function Broker:replay_dead_letters(tbl, ids, opts)
  return move_dead_letters(self, tbl, ids, opts, "replay_dead_letters", core.lq_dead_letters_replay)
end

--- Deletes the dead letters of `ids` (or nil for every one); returns how many.
function Broker:purge_dead_letters(tbl, ids, opts)
  return move_dead_letters(self, tbl, ids, opts, "purge_dead_letters", core.lq_dead_letters_purge)
end

---------------------------------------------------------------------------
-- Retention

local function prune(self, tbl, older_than_ms, opts, fname, c_prune)
  local tptr = table_ptr(tbl, 1, fname)
  if math_type(older_than_ms) ~= "integer" then argerror(2, fname, "integer", older_than_ms) end
  local o, m, c = dead_letter_options(opts, fname, GROUP_OPTION)
  if not o then return nil, m, c end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, c_prune(ptr, tptr, o.group, older_than_ms))
end

--- Deletes the finished rows of `tbl` (kept by a processed_at column)
-- acked more than `older_than_ms` ago, of opts.group or of every group;
-- never a row queued or in work. A thousand rows to a statement, each its
-- own transaction. Returns how many went, or nil, message, code.
function Broker:prune(tbl, older_than_ms, opts)
  return prune(self, tbl, older_than_ms, opts, "prune", core.lq_queue_prune)
end

--- Deletes the dead letters of `tbl` dead-lettered more than
-- `older_than_ms` ago (dead-lettering writes the time in their retry_after
-- column), in batches as prune. Returns how many, or nil, message, code.
function Broker:prune_dead_letters(tbl, older_than_ms, opts)
  return prune(self, tbl, older_than_ms, opts, "prune_dead_letters", core.lq_dead_letters_prune)
end

---------------------------------------------------------------------------
-- Schedules

local SCHEDULE_OPTIONS = { cron = true, every_ms = true, tz = true, catch_up = true,
                           catch_up_ms = true }

--- Enqueues a message into `tbl` at each tick of a schedule named `name`;
-- every broker and process that adds it takes part, and each tick is
-- enqueued once among them. opts: cron (five fields, or six with seconds
-- first, or @hourly and the other shorthands) or every_ms; tz (default UTC);
-- catch_up ("skip", "once", "all") and catch_up_ms; and the message:
-- payload and publish's fields but id and on_duplicate. Returns true, or
-- nil, message, code ("LQ_MISUSE" names a bad field; nothing is written).
function Broker:schedule(tbl, name, opts)
  local tptr = table_ptr(tbl, 1, "schedule")
  if type(name) ~= "string" then argerror(2, "schedule", "string", name) end
  check_type(opts, "table", 3, "schedule")
  local timing, fields = {}, {}
  for k, v in pairs(opts) do
    if SCHEDULE_OPTIONS[k] then timing[k] = v else fields[k] = v end
  end
  -- Its errors name the schedule, as the core's do.
  local ok, options, code = build_options(timing, "schedule")
  if not ok then return nil, format("schedule %s: %s", name, options), code end
  local message, m, c, s, n = build_message(tbl, fields)
  if not message then
    if options then options:free() end
    return nil, format("schedule %s: %s", name, m), c, s, n
  end
  local ptr = self._ptr
  local r1, r2, r3, r4, r5
  if ptr then
    r1, r2, r3, r4, r5 = core.lq_schedule_add(ptr, tptr, name, options and options.ptr, message.ptr)
  end
  message:free()
  if options then options:free() end
  if not ptr then return closed("broker") end
  return done(nil, r1, r2, r3, r4, r5)
end

--- Stops this broker's part in schedule `name`: none of its ticks is
-- enqueued here once it returns. Returns true, or nil, message, code.
function Broker:unschedule(name)
  if type(name) ~= "string" then argerror(1, "unschedule", "string", name) end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, core.lq_schedule_remove(ptr, name))
end

---------------------------------------------------------------------------
-- Subscribing

--- Opens a subscription on `tbl`. Options by name: workers (deliveries in
-- work at once, claimed ahead), poll_interval_ms, lease_ms, max_attempts,
-- workers_by_key, batch, transactional, group (required when the table has
-- a group column). Claims nothing before the first next/deliveries/run.
-- Returns the subscription, or nil, message, code.
function Broker:subscribe(tbl, opts)
  local tptr = table_ptr(tbl, 1, "subscribe")
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  local ok, options, code = build_options(opts, "subscribe")
  if not ok then return nil, options, code end
  local sptr, m, c, s, n = core.lq_subscription_open(ptr, tptr, options and options.ptr)
  if options then options:free() end
  drain_log()
  if not sptr then return nil, m, c, s, n end
  return new_subscription(sptr, self, tbl, opts)
end

return B
