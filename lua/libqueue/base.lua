--- libqueue.base: what every part of the module shares. Loads the SWIG
-- module libqueue.core (the C module, libqueue/core.so) and checks its
-- version, makes the enumerations and status names from the header's
-- constants, and holds the error conventions (raise, argerror, check_type,
-- misuse, closed) and Owned, the handle freed once. Required by every other part; holds no state of its own beyond the
-- raw module and the list of the module's files.

local core = require("libqueue.core")

local C = {}

--- The raw SWIG module (every function and constant of libqueue.h). Handles
-- it returns are not garbage collected: free them with the lq_*_free/close
-- function named in the header.
C.core = core

local type, pairs, setmetatable, getmetatable, rawset, error =
      type, pairs, setmetatable, getmetatable, rawset, error
local format = string.format

---------------------------------------------------------------------------
-- Lua 5.1 (and LuaJIT) to 5.4: what the parts use that not every Lua has.
-- Before 5.3 every number is a double: one with an integer value counts as
-- an integer (ids are exact below 2^53 there).

local floor, huge = math.floor, math.huge

--- math.type: "integer", "float", or nil for a value that is no number.
local math_type = math.type or function(value)
  if type(value) ~= "number" then return nil end
  if value == floor(value) and value > -huge and value < huge then return "integer" end
  return "float"
end
C.math_type = math_type

--- math.tointeger: the integer value of a number, or nil.
C.tointeger = math.tointeger or function(value)
  if math_type(value) == "integer" then return value end
  return nil
end

--- table.pack.
C.pack = table.pack or function(...) return { n = select("#", ...), ... } end

--- setmetatable(fields, class), with class.__gc called once the object is
-- collected on every Lua. Lua 5.1 calls __gc for userdata only: there a
-- userdata (newproxy) that the object holds calls it, while the object it
-- finalizes is still alive.
local GC_PROXY = {}
local new_object = setmetatable
if newproxy then
  new_object = function(fields, class)
    local object = setmetatable(fields, class)
    local finalize = class.__gc
    if finalize then
      local proxy = newproxy(true)
      getmetatable(proxy).__gc = function() finalize(object) end
      rawset(object, GC_PROXY, proxy)
    end
    return object
  end
end
C.new_object = new_object

--- The sources of the module's own files (libqueue.lua, libqueue/*.lua),
-- whose frames raise skips. Each file adds itself with internal().
local INTERNAL = {}

--- Marks the calling file as one of the module's own.
function C.internal()
  INTERNAL[debug.getinfo(2, "S").source] = true
end
C.internal()

--- Raises `message` at the first caller outside the module's files, so that
-- an argument error points at the user's line, however deep it was found.
local function raise(message)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info or not INTERNAL[info.source] then break end
    level = level + 1
  end
  error(message, level)
end
C.raise = raise

---------------------------------------------------------------------------
-- Version

C.version = core.lq_version_string()
C.header_version = format("%d.%d.%d", core.LQ_VERSION_MAJOR, core.LQ_VERSION_MINOR,
                          core.LQ_VERSION_PATCH)
if floor(core.lq_version_number() / 10000) ~= core.LQ_VERSION_MAJOR then
  error(format("libqueue: the linked core is version %s, the module was built for %s",
               C.version, C.header_version), 0)
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

C.ROLES = enum("LQ_ROLE_")         -- payload = 1, attempt = 2, ...
C.ISOLATIONS = enum("LQ_ISOLATION_")
C.STATS = enum("LQ_STAT_")
C.HISTOGRAMS = enum("LQ_HISTOGRAM_") -- claim = 1, wait = 2 (and buckets = 16)
C.HISTOGRAMS.buckets = nil
C.LOG_LEVELS = enum("LQ_LOG_")
C.FORMS = {}
for name, value in pairs(enum("LQ_FORM_")) do C.FORMS[value] = name end

--- Status codes: M.status.LQ_LEASE_LOST == 12, and back: M.status[12] == "LQ_LEASE_LOST".
C.status = {}
for key, value in pairs(core) do
  if type(key) == "string" and math_type(value) == "integer" and core.lq_status_name(value) == key then
    C.status[key] = value
    C.status[value] = key
  end
end

---------------------------------------------------------------------------
-- Errors: arguments of the wrong Lua type raise; failures return
-- nil, message, code_name.

function C.argerror(n, fname, expected, got)
  raise(format("bad argument #%d to '%s' (%s expected, got %s)", n, fname, expected, type(got)))
end
local argerror = C.argerror

function C.check_type(value, expected, n, fname)
  if type(value) ~= expected then argerror(n, fname, expected, value) end
end

function C.misuse(message)
  return nil, message, "LQ_MISUSE"
end

---------------------------------------------------------------------------
-- Option values: every option table of the module (a table description's
-- fields, open's, subscribe's and schedule's options, a method's opts, a
-- message's fields) is type-checked here, so a loose value (fifo = "yes",
-- pool_size = true) is refused rather than read as something else.

local KINDS = {
  string = function(value) return type(value) == "string" end,
  integer = function(value) return type(value) == "number" and C.tointeger(value) ~= nil end,
  boolean = function(value) return type(value) == "boolean" end,
  table = function(value) return type(value) == "table" end,
}
local ARTICLES = { integer = "an integer" }

--- Whether `value` is of type `expected`: "string", "integer" (a float of
-- integer value too, 5000.0), "boolean", "table", or several joined by "|"
-- ("string|integer"); nil is not.
local function fits(value, expected)
  for kind in expected:gmatch("[^|]+") do
    if KINDS[kind](value) then return true end
  end
  return false
end

--- Checks one option value: true, or nil, a message naming the option
-- (`label`, such as "option 'fifo'") and the type it takes, and "LQ_MISUSE".
local function check_value(value, expected, label)
  if fits(value, expected) then return true end
  local names = {}
  for kind in expected:gmatch("[^|]+") do names[#names + 1] = ARTICLES[kind] or "a " .. kind end
  return nil, format("%s takes %s, got %s", label, table.concat(names, " or "),
                     math_type(value) or type(value)), "LQ_MISUSE"
end
C.check_value = check_value

--- Checks the fields of option table `values` named in `types` (name ->
-- type, as check_value takes it): `what` names them in the message ("table
-- field", "option"). Nil fields and names not in `types` are left to the
-- caller. Returns true, or nil, message, "LQ_MISUSE".
function C.check_fields(values, types, what)
  for name, value in pairs(values) do
    local expected = types[name]
    if expected ~= nil then
      local ok, message, code = check_value(value, expected, format("%s '%s'", what, tostring(name)))
      if not ok then return nil, message, code end
    end
  end
  return true
end

function C.closed(what)
  return nil, what .. " is closed", "LQ_CLOSED"
end

---------------------------------------------------------------------------
-- Handles

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
function C.own(ptr, free_fn)
  return new_object({ ptr = ptr, free_fn = free_fn }, Owned)
end

return C
