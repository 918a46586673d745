--- libqueue.table: Table, a queue table's description (libqueue.table{...}):
-- its name, a column per role, the claim form and the DDL it takes; and
-- table_ptr, which checks a Table argument of the other parts.

local C = require("libqueue.base")
C.internal()
local done = require("libqueue.log").done

local core = C.core
local raise, argerror, check_type, misuse, check_fields =
      C.raise, C.argerror, C.check_type, C.misuse, C.check_fields
local ROLES, ISOLATIONS, FORMS = C.ROLES, C.ISOLATIONS, C.FORMS

local type, pairs, setmetatable, getmetatable, tostring =
      type, pairs, setmetatable, getmetatable, tostring
local math_type, new_object = C.math_type, C.new_object
local format = string.format

local T = {}

local Table = {}
Table.__index = Table
Table.__name = "libqueue.table"
T.Table = Table

-- Each field and the Lua type it takes (C.check_fields); a role names a column.
local TABLE_FIELDS = { name = "string", schema = "string", id = "string",
                       id_generated = "boolean", fifo = "boolean", advisory_lock = "string",
                       isolation = "string|integer", dead_letter = "string" }
for role in pairs(ROLES) do TABLE_FIELDS[role] = "string" end

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
-- headers, dedup_key, expires_at, created_at, dead_reason), fifo (boolean), advisory_lock (a key template, "acct-{account}"),
-- isolation ("read_committed", "serializable", ... or the integer),
-- dead_letter (a group, or a table "name" / "schema.name").
-- Returns the table, or nil, message, code.
function T.new(spec, more)
  local name
  if type(spec) == "string" then
    name, spec = spec, more or {}
    check_type(spec, "table", 2, "table")
  else
    check_type(spec, "table", 1, "table")
    name = spec.name
  end
  for key in pairs(spec) do
    if not TABLE_FIELDS[key] then
      return misuse(format("unknown table field '%s'", tostring(key)))
    end
  end
  local fits, m0, c0 = check_fields(spec, TABLE_FIELDS, "table field")
  if not fits then return nil, m0, c0 end
  -- Required: the one field whose nil is refused too.
  if name == nil then return C.check_value(name, "string", "table field 'name'") end
  local ptr, msg, code = core.lq_table_new(name)
  if not ptr then return nil, msg, code end
  local self = new_object({ _ptr = ptr, name = name, schema = spec.schema,
                              id = spec.id or "id", id_generated = spec.id_generated ~= false,
                              advisory_lock = spec.advisory_lock, dead_letter = spec.dead_letter,
                              fifo = spec.fifo == true, columns = {} }, Table)
  local function fail(m, c, ...)
    self:close()
    return nil, m, c, ...
  end
  local ok, m, c
  if spec.schema ~= nil then
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

--- The C description of argument #n of `fname`, which must be an open Table
-- (else it raises).
local function table_ptr(tbl, n, fname)
  if getmetatable(tbl) ~= Table then argerror(n, fname, "libqueue.table", tbl) end
  if not tbl._ptr then raise(format("bad argument #%d to '%s' (the table was closed)", n, fname)) end
  return tbl._ptr
end
T.table_ptr = table_ptr

--- The claim form: "lease", "advisory" or "row_lock".
function Table:form()
  return FORMS[core.lq_table_form(table_ptr(self, 1, "form"))]
end

--- Whether a column plays `role` ("payload", "retry_after", ...).
function Table:has(role)
  return self.columns[role] ~= nil
end

--- Whether a dialect ("sqlite", "postgresql", "mysql") can serve this
-- description's form, as a subscription's open checks it: true, or nil, a
-- message that says why not and what to use instead, and "LQ_DIALECT".
function Table:check_form(dialect)
  check_type(dialect, "string", 1, "check_form")
  return done(nil, core.lq_table_check_form(table_ptr(self, 1, "check_form"), dialect))
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

return T
