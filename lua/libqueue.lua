--- libqueue: task queues kept in a service's own SQL tables (Lua 5.4 binding).
--
--     local libqueue = require("libqueue")
--     local jobs = assert(libqueue.table{ name = "jobs", payload = "payload",
--                                         attempt = "attempt", locked_until = "locked_until" })
--     local broker = assert(libqueue.open("sqlite:jobs.db", { pool_size = 4 }))
--     assert(broker:publish(jobs, '{"image": "cat.png"}'))
--     local sub = assert(broker:subscribe(jobs, { poll_interval_ms = 50 }))
--     sub:run(function(delivery) resize(delivery.payload) end, { timeout = 1 })
--     sub:close(); broker:close()
--
-- Errors. Every method that can fail returns its result (true when there is
-- nothing else to return) on success, and on failure
--     nil, message, code_name [, sqlstate, native]
-- with code_name the C status name ("LQ_LEASE_LOST", "LQ_SCHEMA", ...), like
-- luasocket and luv. Arguments of the wrong Lua type (a number for a table
-- name, a table for a payload) are programming errors and raise with error(),
-- as the standard library does. Two places cannot return nil, message: the
-- `deliveries` iterator raises on failures other than a timeout or a stopped
-- subscription, and reading a field of a released delivery raises.
--
-- Threads. Lua handlers always run on the calling thread: the binding uses the
-- core's pull API (lq_subscription_next) only. The core's own threads claim
-- ahead and extend the lease of every delivery held, so a slow handler keeps
-- its row for as long as it runs. sub:run hands the acks and retries that
-- follow a handler's return to threads of the module's own (the settler,
-- lua/lq_lua_settler.c), which never enter Lua, and pulls the next delivery
-- while they work: `workers` deliveries are settled at once, as in C.
--
-- Memory. Tables, brokers, subscriptions and deliveries are freed by the
-- garbage collector, in any order (the core keeps a broker alive while a
-- subscription of it lives, and a subscription while a pulled delivery of it
-- lives), or at once by close()/release(), also usable as <close> variables.
-- Each handle is freed exactly once.

local core = require("libqueue_core")

local M = {}

--- The raw SWIG module (every function and constant of libqueue.h). Handles
-- it returns are not garbage collected: free them with the lq_*_free/close
-- function named in the header.
M.core = core

local type, pairs, ipairs, setmetatable, tostring, error, select =
      type, pairs, ipairs, setmetatable, tostring, error, select
local math_type, tointeger = math.type, math.tointeger
local format = string.format

--- Raises `message` at the first caller outside this file, so that an
-- argument error points at the user's line, however deep it was found.
local THIS_FILE = debug.getinfo(1, "S").source
local function raise(message)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info or info.source ~= THIS_FILE then break end
    level = level + 1
  end
  error(message, level)
end

---------------------------------------------------------------------------
-- Version

M.version = core.lq_version_string()
M.header_version = format("%d.%d.%d", core.LQ_VERSION_MAJOR, core.LQ_VERSION_MINOR,
                          core.LQ_VERSION_PATCH)
if core.lq_version_number() // 10000 ~= core.LQ_VERSION_MAJOR then
  error(format("libqueue: the linked core is version %s, the module was built for %s",
               M.version, M.header_version), 0)
end

---------------------------------------------------------------------------
-- Enumerations, made from the header's constants: no name is spelled here.

--- name (lower case, without prefix) -> value, for each prefix.
local function enum(prefix)
  local by_name = {}
  for key, value in pairs(core) do
    if type(key) == "string" and key:sub(1, #prefix) == prefix and math_type(value) == "integer" then
      by_name[key:sub(#prefix + 1):lower()] = value
    end
  end
  return by_name
end

local ROLES = enum("LQ_ROLE_")         -- payload = 1, attempt = 2, ...
local ISOLATIONS = enum("LQ_ISOLATION_")
local STATS = enum("LQ_STAT_")
local LOG_LEVELS = enum("LQ_LOG_")
local FORMS = {}
for name, value in pairs(enum("LQ_FORM_")) do FORMS[value] = name end

--- Status codes: M.status.LQ_LEASE_LOST == 12, and back: M.status[12] == "LQ_LEASE_LOST".
M.status = {}
for key, value in pairs(core) do
  if type(key) == "string" and math_type(value) == "integer" and core.lq_status_name(value) == key then
    M.status[key] = value
    M.status[value] = key
  end
end

M.roles, M.isolations, M.stats, M.log_levels = ROLES, ISOLATIONS, STATS, LOG_LEVELS

local LEVEL_NAMES = {}
for name, value in pairs(LOG_LEVELS) do LEVEL_NAMES[value] = name end

local function level_value(level)
  if level == nil then return LOG_LEVELS.warning end
  if math_type(level) == "integer" then return level end
  local value = type(level) == "string" and LOG_LEVELS[level:lower()]
  if not value then raise(format("unknown log level %s", tostring(level))) end
  return value
end

---------------------------------------------------------------------------
-- Logging: the core's messages (queued by the C shim from any thread) and
-- the binding's own (handler errors in run) go to one Lua function, always
-- called on the Lua thread, at each call into the binding.

local function default_logger(level, message)
  io.stderr:write("libqueue ", level, ": ", message, "\n")
end

local logger = default_logger
local min_level = LOG_LEVELS.warning
local capturing = true

local function emit(level, message)
  if level < min_level then return end
  local ok, err = pcall(logger, LEVEL_NAMES[level] or tostring(level), message)
  if not ok then
    io.stderr:write("libqueue: the logger failed: ", tostring(err), "\n")
  end
end

--- Hands queued core messages to the logger. The binding calls it on every
-- call into the core; call it yourself in a long pause of your own.
local function drain_log()
  if not capturing then return end
  local list = core.lq_lua_log_drain()
  if list then
    for i = 1, #list, 2 do emit(list[i], list[i + 1]) end
  end
end
M.drain_log = drain_log

--- set_logger(fn [, level]): fn(level_name, message) receives the messages at
-- or above `level` ("debug", "info", "warning" (default), "error").
-- set_logger(nil) restores the default (stderr). set_logger(false) gives the
-- core back its own stderr logging, for embedders that install their own
-- lq_set_log sink from C (the core has one sink per process).
function M.set_logger(fn, level)
  drain_log()
  if fn == false then
    capturing = false
    core.lq_lua_log_capture(false)
    logger = default_logger
    return true
  end
  if fn ~= nil and type(fn) ~= "function" then
    raise("bad argument #1 to 'set_logger' (function, nil or false expected)")
  end
  min_level = level_value(level)
  logger = fn or default_logger
  capturing = true
  core.lq_lua_log_capture(min_level)
  return true
end

core.lq_lua_log_capture(min_level)

---------------------------------------------------------------------------
-- Helpers

local function argerror(n, fname, expected, got)
  raise(format("bad argument #%d to '%s' (%s expected, got %s)", n, fname, expected, type(got)))
end

local function check_type(value, expected, n, fname)
  if type(value) ~= expected then argerror(n, fname, expected, value) end
end

local function misuse(message)
  return nil, message, "LQ_MISUSE"
end

local function closed(what)
  return nil, what .. " is closed", "LQ_CLOSED"
end

--- A handle freed once: now by free(), else by the garbage collector.
local Owned = {}
Owned.__index = Owned
Owned.__gc = function(self) self:free() end
Owned.__close = function(self) self:free() end
function Owned:free()
  local ptr = self.ptr
  if ptr then
    self.ptr = nil
    self.free_fn(ptr)
  end
end
local function own(ptr, free_fn)
  return setmetatable({ ptr = ptr, free_fn = free_fn }, Owned)
end

--- An lq_options set (Owned) from an option table, or nil for none. Names go
-- through lq_option_find, so any option the core knows works here.
local function build_options(opts, fname)
  if opts == nil then return true, nil end
  check_type(opts, "table", 2, fname)
  if next(opts) == nil then return true, nil end
  local ptr, msg, code = core.lq_options_new()
  if not ptr then return nil, msg, code end
  local options = own(ptr, core.lq_options_free)
  for name, value in pairs(opts) do
    if type(name) ~= "string" then
      options:free()
      raise(format("bad option key %s in '%s' (names are strings)", tostring(name), fname))
    end
    local option, kind, code2 = core.lq_option_find(name)
    if not option then
      options:free()
      return nil, kind, code2
    end
    local ok, m, c
    if kind == core.LQ_OPTION_STRING then
      if type(value) ~= "string" then
        options:free()
        raise(format("option '%s' takes a string, got %s", name, type(value)))
      end
      ok, m, c = core.lq_options_set_str(options.ptr, option, value)
    else
      local number = value
      if type(value) == "boolean" then number = value and 1 or 0 end
      number = type(number) == "number" and tointeger(number) or nil
      if not number then
        options:free()
        raise(format("option '%s' takes an integer, got %s", name,
                     math_type(value) or type(value)))
      end
      ok, m, c = core.lq_options_set_int(options.ptr, option, number)
    end
    if not ok then
      options:free()
      return nil, format("option %s=%s: %s", name, tostring(value), m), c
    end
  end
  return true, options
end

--- Free an Owned options set (or nil) and pass the values through.
local function done(options, ...)
  if options then options:free() end
  drain_log()
  return ...
end

---------------------------------------------------------------------------
-- Table

local Table = {}
Table.__index = Table
Table.__name = "libqueue.table"

local TABLE_FIELDS = { name = true, schema = true, id = true, id_generated = true, fifo = true,
                       advisory_lock = true, isolation = true, dead_letter = true }
for role in pairs(ROLES) do TABLE_FIELDS[role] = true end

local function isolation_value(isolation)
  if math_type(isolation) == "integer" then return isolation end
  if type(isolation) == "string" then
    local key = isolation:lower():gsub("[%s%-]+", "_")
    return ISOLATIONS[key]
  end
  return nil
end

--- libqueue.table{ name = "jobs", payload = "payload", ... } or
-- libqueue.table("jobs", { payload = "payload", ... }).
--
-- Fields: name (required), schema, id (default "id"), id_generated (default
-- true), one field per role naming its column (payload, attempt,
-- locked_until, group, partition_key, priority, retry_after, processed_at,
-- headers), fifo (boolean), advisory_lock (a key template, "acct-{account}"),
-- isolation ("read_committed", "serializable", ... or the integer),
-- dead_letter (a group, or a table "name" / "schema.name").
-- Returns the table, or nil, message, code.
function M.table(spec, more)
  local name
  if type(spec) == "string" then
    name, spec = spec, more or {}
    check_type(spec, "table", 2, "table")
  else
    check_type(spec, "table", 1, "table")
    name = spec.name
  end
  if type(name) ~= "string" then
    raise("bad argument to 'table' (the name must be a string)")
  end
  for key in pairs(spec) do
    if not TABLE_FIELDS[key] then
      return misuse(format("unknown table field '%s'", tostring(key)))
    end
  end
  local ptr, msg, code = core.lq_table_new(name)
  if not ptr then return nil, msg, code end
  local self = setmetatable({ _ptr = ptr, name = name, schema = spec.schema,
                              id = spec.id or "id", id_generated = spec.id_generated ~= false,
                              advisory_lock = spec.advisory_lock, dead_letter = spec.dead_letter,
                              fifo = spec.fifo == true, columns = {} }, Table)
  local function fail(m, c, ...)
    self:close()
    return nil, m, c, ...
  end
  local ok, m, c
  if spec.schema ~= nil then
    check_type(spec.schema, "string", 1, "table")
    ok, m, c = core.lq_table_set_schema(ptr, spec.schema)
    if not ok then return fail(m, c) end
  end
  if spec.id ~= nil or spec.id_generated == false then
    ok, m, c = core.lq_table_set_id(ptr, self.id, self.id_generated and 1 or 0)
    if not ok then return fail(m, c) end
  end
  for role, value in pairs(ROLES) do
    local column = spec[role]
    if column ~= nil then
      if type(column) ~= "string" then
        self:close()
        raise(format("table field '%s' must name a column (a string), got %s", role, type(column)))
      end
      ok, m, c = core.lq_table_set_column(ptr, value, column)
      if not ok then return fail(m, c) end
      self.columns[role] = column
    end
  end
  if spec.fifo then
    ok, m, c = core.lq_table_set_fifo(ptr, 1)
    if not ok then return fail(m, c) end
  end
  if spec.advisory_lock ~= nil then
    ok, m, c = core.lq_table_set_advisory_lock(ptr, spec.advisory_lock)
    if not ok then return fail(m, c) end
  end
  if spec.isolation ~= nil then
    local level = isolation_value(spec.isolation)
    if not level then
      return fail(format("unknown isolation level '%s'", tostring(spec.isolation)), "LQ_MISUSE")
    end
    ok, m, c = core.lq_table_set_isolation(ptr, level)
    if not ok then return fail(m, c) end
  end
  if spec.dead_letter ~= nil then
    ok, m, c = core.lq_table_set_dead_letter(ptr, spec.dead_letter)
    if not ok then return fail(m, c) end
  end
  return self
end

local function table_ptr(tbl, n, fname)
  if getmetatable(tbl) ~= Table then argerror(n, fname, "libqueue.table", tbl) end
  if not tbl._ptr then raise(format("bad argument #%d to '%s' (the table was closed)", n, fname)) end
  return tbl._ptr
end

--- The claim form: "lease", "advisory" or "row_lock".
function Table:form()
  return FORMS[core.lq_table_form(table_ptr(self, 1, "form"))]
end

--- Whether a column plays `role` ("payload", "retry_after", ...).
function Table:has(role)
  return self.columns[role] ~= nil
end

--- The recommended CREATE TABLE and CREATE INDEX statements for a dialect
-- ("sqlite", "postgresql", "mysql"), separated by ";\n".
function Table:create_sql(dialect)
  check_type(dialect, "string", 1, "create_sql")
  return done(nil, core.lq_table_create_sql(table_ptr(self, 1, "create_sql"), dialect))
end

--- Frees the description now (also done by the garbage collector). A
-- subscription already opened on it is not affected.
function Table:close()
  local ptr = self._ptr
  if ptr then
    self._ptr = nil
    core.lq_table_free(ptr)
  end
end
Table.__gc = Table.close
Table.__close = Table.close
function Table:__tostring()
  return format("libqueue.table(%s%s)", self.name, self._ptr and "" or ", closed")
end

---------------------------------------------------------------------------
-- Broker

local Broker = {}
Broker.__index = Broker
Broker.__name = "libqueue.broker"

--- The URL as it may be shown: the password of its user info and of its
-- password, sslpassword and tls_passphrase parameters as "***".
function M.redact_url(url)
  check_type(url, "string", 1, "redact_url")
  return assert(core.lq_redact_url(url))
end

--- Opens a broker on a URL ("sqlite:///abs/path.db", "sqlite:relative.db").
-- Options by name: pool_size, connect_timeout_ms, statement_timeout_ms,
-- acquire_timeout_ms, connection_limit, listen_notify (see libqueue.h).
-- Returns the broker, or nil, message, code.
function M.open(url, opts)
  check_type(url, "string", 1, "open")
  local ok, options, code = build_options(opts, "open")
  if not ok then return nil, options, code end
  local ptr, msg, code2, sqlstate, native = core.lq_broker_open(url, options and options.ptr)
  if options then options:free() end
  drain_log()
  if not ptr then return nil, msg, code2, sqlstate, native end
  -- Only the URL as it may be shown is kept: its password is "***".
  return setmetatable({ _ptr = ptr, url = M.redact_url(url), dialect = core.lq_broker_dialect(ptr) },
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
    if opts.verify_only then flags = core.LQ_CREATE_VERIFY_ONLY end
  end
  local ptr = self._ptr
  if not ptr then return closed("broker") end
  return done(nil, core.lq_table_create(ptr, tptr, flags))
end

local MESSAGE_FIELDS = { payload = true, id = true, group = true, partition_key = true,
                         priority = true, delay_ms = true, headers = true }

local function integer_field(value, name)
  local n = type(value) == "number" and tointeger(value)
  if not n then
    raise(format("message field '%s' must be an integer, got %s", name,
                 math_type(value) or type(value)))
  end
  return n
end

local function string_field(value, name)
  if type(value) ~= "string" then
    raise(format("message field '%s' must be a string, got %s", name, type(value)))
  end
  return value
end

--- An Owned lq_message with `fields` set, or nil, message, code.
local function build_message(tbl, fields)
  for key in pairs(fields) do
    if not MESSAGE_FIELDS[key] then
      return misuse(format("unknown message field '%s'", tostring(key)))
    end
  end
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
    string_field(payload, "payload")
    -- An empty payload is written only to a table with a payload column, so
    -- a table without one takes publish(tbl) or publish(tbl, "").
    if #payload > 0 or tbl.columns.payload then
      ok, m, c, s, n = set(core.lq_message_set_payload, payload)
    end
  end
  if ok and fields.id ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_id, integer_field(fields.id, "id"))
  end
  if ok and fields.group ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_group, string_field(fields.group, "group"))
  end
  if ok and fields.partition_key ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_partition_key,
                         string_field(fields.partition_key, "partition_key"))
  end
  if ok and fields.priority ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_priority, integer_field(fields.priority, "priority"))
  end
  if ok and fields.delay_ms ~= nil then
    ok, m, c, s, n = set(core.lq_message_set_delay_ms, integer_field(fields.delay_ms, "delay_ms"))
  end
  if ok and fields.headers ~= nil then
    if type(fields.headers) ~= "table" then
      message:free()
      raise(format("message field 'headers' must be a table, got %s", type(fields.headers)))
    end
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
      return nil, format("message %d: %s", i, m), c, s, n
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
-- table's ids are not generated). A field the table has no column for fails
-- with LQ_SCHEMA and writes nothing.
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

--- Writes many messages in one transaction (all or none); returns their ids
-- in order. Each message is a payload string or a table of publish's fields
-- with `payload` ({ payload = "..", group = "g" }).
function Broker:publish_many(tbl, list)
  check_type(list, "table", 2, "publish_many")
  local batch = {}
  for i, message in ipairs(list) do
    if type(message) == "string" then
      batch[i] = { payload = message }
    elseif type(message) == "table" then
      batch[i] = message
    else
      raise(format("bad message %d to 'publish_many' (string or table expected, got %s)",
                   i, type(message)))
    end
  end
  if #batch == 0 then table_ptr(tbl, 1, "publish_many"); return {} end
  return publish(self, tbl, batch, "publish_many")
end

---------------------------------------------------------------------------
-- Subscription and Delivery

local Subscription = {}
Subscription.__index = Subscription
Subscription.__name = "libqueue.subscription"

local Delivery = {}
Delivery.__name = "libqueue.delivery"

--- The deliveries a subscription opened with `opts` keeps in work at once:
-- its lanes under workers_by_key, else its workers.
local function workers_of(opts)
  if opts == nil then return 1 end
  local lanes = type(opts.workers_by_key) == "number" and tointeger(opts.workers_by_key)
  if lanes and lanes > 0 then return lanes end
  return type(opts.workers) == "number" and tointeger(opts.workers) or 1
end

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
  return setmetatable({ _ptr = sptr, broker = self, table = tbl, workers = workers_of(opts) },
                      Subscription)
end

--- Longest single wait in C, so that the interpreter's Ctrl-C hook runs.
local WAIT_SLICE_MS = 500

local function new_delivery(ptr, subscription)
  return setmetatable({ _ptr = ptr, subscription = subscription, settled = false }, Delivery)
end

--- The next claimed delivery, waiting up to `timeout` seconds (nil: no
-- limit). Returns the delivery, or nil, message, "LQ_TIMEOUT" when none came,
-- nil, message, "LQ_CLOSED" once stopped. The delivery is the caller's:
-- settle it, and release it (release(), a <close> variable, or the garbage
-- collector; until then the core keeps its lease alive).
function Subscription:next(timeout)
  local ptr = self._ptr
  if not ptr then return closed("subscription") end
  local left_ms = -1
  if timeout ~= nil then
    if type(timeout) ~= "number" then argerror(1, "next", "number", timeout) end
    if not (timeout >= 0) then -- also NaN
      return misuse(format("next: timeout must be >= 0 seconds, or nil for no limit; got %s",
                           tostring(timeout)))
    end
    left_ms = math.ceil(timeout * 1000)
  end
  local wait_ms = left_ms
  while true do
    local slice = WAIT_SLICE_MS
    if left_ms >= 0 and left_ms < slice then slice = left_ms end
    local d, m, c, s, n = core.lq_subscription_next(ptr, slice)
    drain_log()
    if d then return new_delivery(d, self) end
    -- A slice may end in the claims' failure: it counts once they have
    -- failed for the whole wait, as in C.
    local outage = c ~= "LQ_TIMEOUT" and c ~= "LQ_CLOSED" and c ~= "LQ_MISUSE"
    if not outage and c ~= "LQ_TIMEOUT" then return nil, m, c, s, n end
    if left_ms >= 0 then
      left_ms = left_ms - slice
      if left_ms <= 0 then
        local _, hm, hc, hs, hn, failing_ms = self:health()
        if hc and failing_ms >= wait_ms then
          return nil, format("no delivery within %gs: claims have failed for %d ms: %s",
                             timeout, failing_ms, hm), hc, hs, hn
        end
        return nil, format("no delivery within %gs", timeout), "LQ_TIMEOUT"
      end
    end
  end
end

--- Whether the subscription's claims reach the database: true while they
-- work, else nil, message, code, sqlstate, native, and how long (ms) claims
-- have failed in a row. A pull that times out during an outage returns the
-- failure instead of "LQ_TIMEOUT".
function Subscription:health()
  local ptr = self._ptr
  if not ptr then return closed("subscription") end
  local ok, m, c, s, n, failing_ms = core.lq_subscription_health(ptr)
  drain_log()
  if ok then return true end
  return nil, m, c, s, n, failing_ms
end

--- for delivery in sub:deliveries(timeout) do ... end
-- Pulled deliveries until none comes within `timeout` seconds (nil: until the
-- subscription is stopped). Each delivery is released when the loop moves on
-- (or is left, by break or error): settle it in the loop body; use next() to
-- keep a delivery longer. Failures other than a timeout or a stop raise.
function Subscription:deliveries(timeout)
  local last
  local function release_last()
    if last then
      last:release()
      last = nil
    end
  end
  local function iterate()
    release_last()
    local d, m, c = self:next(timeout)
    if d then
      last = d
      return d
    end
    if c == "LQ_TIMEOUT" or c == "LQ_CLOSED" then return nil end
    raise(format("libqueue: next failed: %s (%s)", tostring(m), tostring(c)))
  end
  return iterate, nil, nil, setmetatable({}, { __close = release_last })
end

local function describe_error(err)
  return type(err) == "string" and err or tostring(err)
end

local SETTLE_ACK, SETTLE_RETRY, SETTLE_RETRY_AFTER =
      core.LQ_LUA_SETTLE_ACK, core.LQ_LUA_SETTLE_RETRY, core.LQ_LUA_SETTLE_RETRY_AFTER

--- Settles on this thread (run with settlers = 0, or a settler out of memory).
local function settle_here(d, outcome, delay_ms)
  if outcome == SETTLE_ACK then return d:ack() end
  if outcome == SETTLE_RETRY_AFTER then return d:retry_after(delay_ms) end
  return d:retry()
end

--- Hands d over to the settler, which settles and frees it; false (d still
-- ours) when it could not take it.
local function hand_over(settler, d, outcome, delay_ms)
  if not core.lq_lua_settler_push(settler.ptr, d._ptr, outcome, delay_ms or 0) then
    return false
  end
  d._ptr = nil -- the settler's now: neither released nor collected here
  d.settled = true
  return true
end

local function start_settler(threads, label, together)
  local ptr = core.lq_lua_settler_new(threads, label, together)
  return ptr and own(ptr, core.lq_lua_settler_free)
end

--- Waits for every settlement handed over, adds its counts, stops the threads.
local function finish_settler(settler, counts)
  if not settler then return end
  local ptr = settler.ptr
  core.lq_lua_settler_wait(ptr, 0)
  counts.acked = counts.acked + core.lq_lua_settler_count(ptr, core.LQ_LUA_SETTLED_ACKED)
  counts.retried = counts.retried + core.lq_lua_settler_count(ptr, core.LQ_LUA_SETTLED_RETRIED)
  counts.settle_errors = counts.settle_errors
                         + core.lq_lua_settler_count(ptr, core.LQ_LUA_SETTLED_ERRORS)
  settler:free()
end

--- sub:run(fn [, { timeout = seconds, max = n, retry_delay_ms = ms, settlers = n }])
-- Pulls deliveries and calls fn(delivery) for each, on the calling thread.
-- Returning normally acks the delivery unless fn settled it; an error()
-- (with its traceback) is logged at level "error" and the delivery is retried
-- (retry_after(retry_delay_ms) when given). Those acks and retries run on
-- `settlers` threads of the module while run pulls the next delivery. In the
-- lease form (and the advisory form on SQLite) a thread acks what queued
-- meanwhile together (lq_deliveries_ack: one statement and one commit), and
-- the default is one thread; elsewhere each settles on its own, and the
-- default is the subscription's workers (its lanes under workers_by_key).
-- With settlers = 0 they run here, one at a time. A delivery handed over is
-- no longer fn's: keep none past its call. A failed settlement (say
-- LQ_LEASE_LOST) is logged as a warning. Stops after `max` deliveries, when
-- none comes within `timeout` seconds (nil: until stopped, e.g. by fn calling
-- sub:stop()), or when the subscription is stopped, and returns once every
-- delivery it pulled is settled.
-- Returns the number of deliveries handled and a table of counts
-- { acked, retried, failed (fn raised), settled_by_handler, settle_errors },
-- or nil, message, code if pulling failed.
function Subscription:run(fn, opts)
  check_type(fn, "function", 1, "run")
  if opts ~= nil then check_type(opts, "table", 2, "run") end
  opts = opts or {}
  local timeout, max, retry_delay = opts.timeout, opts.max, opts.retry_delay_ms
  if max ~= nil and not tointeger(max) then raise("run: max must be an integer") end
  if retry_delay ~= nil then
    retry_delay = type(retry_delay) == "number" and tointeger(retry_delay)
    if not retry_delay then raise("run: retry_delay_ms must be an integer") end
  end
  -- Acks share a statement where a delivery holds no connection: the lease
  -- form, and the advisory form on SQLite (its keys live in the process).
  -- One thread then acks all that queued while it was busy, one commit for
  -- them (more threads would split them, and on SQLite contend for its one
  -- writer); else a thread per worker settles side by side.
  local form = self.table:form()
  local together = form == "lease" or (form == "advisory" and self.broker.dialect == "sqlite")
  local settlers = opts.settlers
  if settlers == nil then settlers = together and 1 or self.workers or 1 end
  settlers = type(settlers) == "number" and tointeger(settlers)
  if not settlers or settlers < 0 then raise("run: settlers must be an integer >= 0") end
  -- Closed (every handed-over delivery settled) however run is left; nil
  -- (settle here) with no settlers or no thread to be had.
  local settler <close> = settlers > 0
                          and start_settler(settlers, self.table.name, together)
                          or nil
  local counts = { acked = 0, retried = 0, failed = 0, settled_by_handler = 0, settle_errors = 0 }
  local handled = 0
  -- Pulls at once: the core claims no more than the subscription's workers
  -- (and the rows it looks ahead) while those queued here are in work.
  while not max or handled < max do
    local d, m, c, s, n = self:next(timeout)
    if not d then
      if c == "LQ_TIMEOUT" or c == "LQ_CLOSED" then break end
      return nil, m, c, s, n
    end
    handled = handled + 1
    -- Read first (fn may release d), from the core: d's field cache is made
    -- only if fn reads a field.
    local id, attempt = core.lq_delivery_id(d._ptr), core.lq_delivery_attempt(d._ptr)
    local ok, err = xpcall(fn, debug.traceback, d)
    if not ok then
      counts.failed = counts.failed + 1
      emit(LOG_LEVELS.error, format("handler failed on row %s of %s (attempt %d); %s: %s",
                                    tostring(id), self.table.name, attempt,
                                    d.settled and "it had settled the row"
                                             or "the row will be retried",
                                    describe_error(err)))
    end
    if d.settled then
      counts.settled_by_handler = counts.settled_by_handler + 1
    elseif d._ptr then
      local outcome = ok and SETTLE_ACK or retry_delay and SETTLE_RETRY_AFTER or SETTLE_RETRY
      if not (settler and hand_over(settler, d, outcome, retry_delay)) then
        local done_ok, sm, sc = settle_here(d, outcome, retry_delay)
        if done_ok then
          if ok then counts.acked = counts.acked + 1 else counts.retried = counts.retried + 1 end
        else
          counts.settle_errors = counts.settle_errors + 1
          emit(LOG_LEVELS.warning, format("%s of row %s of %s failed: %s (%s)",
                                          ok and "ack" or "retry", tostring(id),
                                          self.table.name, tostring(sm), tostring(sc)))
        end
      end
    end
    d:release()
  end
  finish_settler(settler, counts)
  drain_log()
  return handled, counts
end

--- Stops claiming and returns claimed rows not handed out. Deliveries held
-- stay valid and may still be settled. Idempotent.
function Subscription:stop()
  local ptr = self._ptr
  if not ptr then return true end
  return done(nil, core.lq_subscription_stop(ptr))
end

--- Stops and frees the subscription (idempotent). Deliveries still held stay
-- usable.
function Subscription:close()
  local ptr = self._ptr
  if ptr then
    self._ptr = nil
    core.lq_subscription_close(ptr)
    drain_log()
  end
  return true
end
-- Finalizers free without draining the log (no logger runs inside the GC).
function Subscription:__gc()
  local ptr = self._ptr
  if ptr then
    self._ptr = nil
    core.lq_subscription_close(ptr)
  end
end
Subscription.__close = Subscription.close
function Subscription:__tostring()
  return format("libqueue.subscription(%s%s)", self.table.name, self._ptr and "" or ", closed")
end

--- A counter: "claims", "empty_claims", "delivered", "settled",
-- "extensions", "in_work", "waiting".
function Subscription:stat(name)
  local which = STATS[name]
  if not which then raise(format("unknown stat '%s'", tostring(name))) end
  local ptr = self._ptr
  if not ptr then return closed("subscription") end
  return core.lq_subscription_stat(ptr, which)
end

-- Delivery: fields are read lazily from the row and kept.

local function live(self)
  local ptr = rawget(self, "_ptr")
  if not ptr then
    raise("libqueue: delivery used after it was released")
  end
  return ptr
end

local FIELDS = {}
function FIELDS.id(ptr) return core.lq_delivery_id(ptr) end
function FIELDS.payload(ptr) return core.lq_delivery_payload(ptr) end
function FIELDS.attempt(ptr) return core.lq_delivery_attempt(ptr) end
function FIELDS.group(ptr) return core.lq_delivery_group(ptr) end
function FIELDS.partition_key(ptr) return core.lq_delivery_partition_key(ptr) end
function FIELDS.headers(ptr)
  local headers = {}
  for i = 0, core.lq_delivery_header_count(ptr) - 1 do
    local name, value, code = core.lq_delivery_header_at(ptr, i)
    if not name then raise(format("libqueue: header %d: %s (%s)", i, value, code)) end
    headers[name] = value
  end
  return headers
end

local NO_VALUE = {}

function Delivery.__index(self, key)
  local method = Delivery[key]
  if method ~= nil then return method end
  if key == "alive" then return rawget(self, "_ptr") ~= nil end
  if key == "lease_expiry_ms" then return core.lq_delivery_lease_expiry_ms(live(self)) end
  local getter = FIELDS[key]
  if not getter then return nil end
  local cache = rawget(self, "_cache")
  if not cache then
    cache = {}
    rawset(self, "_cache", cache)
  end
  local value = cache[key]
  if value == nil then
    value = getter(live(self))
    cache[key] = value == nil and NO_VALUE or value
  elseif value == NO_VALUE then
    value = nil
  end
  if key == "headers" and value then
    local copy = {}
    for k, v in pairs(value) do copy[k] = v end
    value = copy
  end
  return value
end

--- One header's value, or nil.
function Delivery:header(name)
  check_type(name, "string", 1, "header")
  return core.lq_delivery_header(live(self), name)
end

--- Transactional mode (subscriptions opened with transactional = 1): runs one
-- statement of the handler's own in the delivery's transaction and returns
-- the rows it changed. Parameters use the database's placeholders (? on
-- SQLite and MySQL, $1 on PostgreSQL) and go as text; nil is SQL NULL. An ack
-- commits these writes with the settlement; every other outcome rolls them
-- back. Outside transactional mode: nil, message, "LQ_MISUSE".
function Delivery:execute(sql, ...)
  check_type(sql, "string", 1, "execute")
  local params = table.pack(...)
  for i = 1, params.n do
    local kind = type(params[i])
    if kind ~= "string" and kind ~= "number" and kind ~= "nil" then
      raise(format("bad argument #%d to 'execute' (string, number or nil expected, got %s)",
                   i + 1, kind))
    end
  end
  local ptr = rawget(self, "_ptr")
  if not ptr then return misuse("delivery used after it was released") end
  return done(nil, core.lq_delivery_exec(ptr, sql, params))
end

local function settle(self, fn, ...)
  local ptr = rawget(self, "_ptr")
  if not ptr then return misuse("delivery used after it was released") end
  local ok, m, c, s, n = fn(ptr, ...)
  -- A failed settlement (LQ_LEASE_LOST, ...) is still the one settlement:
  -- the core refuses a second with LQ_MISUSE.
  self.settled = true
  drain_log()
  if not ok then return nil, m, c, s, n end
  return true
end

--- Finishes the row: deletes it, or sets processed_at. true, or nil,
-- message, code (LQ_LEASE_LOST: another claim holds the row; nothing changed).
function Delivery:ack() return settle(self, core.lq_delivery_ack) end
--- Returns the row to the queue now.
function Delivery:retry() return settle(self, core.lq_delivery_retry) end
--- Hides the row for delay_ms (a plain retry, with a logged warning, when
-- the table has no retry_after column).
function Delivery:retry_after(delay_ms)
  local ms = type(delay_ms) == "number" and tointeger(delay_ms)
  if not ms then argerror(1, "retry_after", "integer", delay_ms) end
  return settle(self, core.lq_delivery_retry_after, ms)
end
--- Moves the row to the table's dead-letter destination.
function Delivery:dead_letter() return settle(self, core.lq_delivery_dead_letter) end

--- Frees the delivery now (idempotent). Unsettled, the row goes back to the
-- queue at once, with no attempt spent.
function Delivery:release()
  local ptr = rawget(self, "_ptr")
  if ptr then
    self._ptr = nil
    core.lq_delivery_free(ptr)
    drain_log()
  end
  return true
end
Delivery.close = Delivery.release
function Delivery:__gc()
  local ptr = rawget(self, "_ptr")
  if ptr then
    self._ptr = nil
    core.lq_delivery_free(ptr)
  end
end
Delivery.__close = Delivery.release
function Delivery:__tostring()
  if not rawget(self, "_ptr") then return "libqueue.delivery(released)" end
  return format("libqueue.delivery(id=%s, attempt=%d)", tostring(self.id), self.attempt)
end

M.Table, M.Broker, M.Subscription, M.Delivery = Table, Broker, Subscription, Delivery

return M
