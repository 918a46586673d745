--- libqueue.log: the logger. The core's messages (queued by the C shim,
-- lua/lq_lua_log.c, from any thread) and the binding's own (handler errors
-- in run) go to one Lua function, always called on the Lua thread, at each
-- call into the binding. Holds the logger's state (the function, its level,
-- whether the shim captures), drain_log, set_logger, and done, which ends a
-- call into the core. Requiring it turns the shim's capture on.

local C = require("libqueue.base")
C.internal()

local core = C.core
local raise = C.raise
local LOG_LEVELS = C.LOG_LEVELS

local type, pairs, tostring, pcall = type, pairs, tostring, pcall
local math_type = C.math_type
local format = string.format

local L = {}

local LEVEL_NAMES = {}
for name, value in pairs(LOG_LEVELS) do LEVEL_NAMES[value] = name end

local function level_value(level)
  if level == nil then return LOG_LEVELS.warning end
  if math_type(level) == "integer" then return level end
  local value = type(level) == "string" and LOG_LEVELS[level:lower()]
  if not value then raise(format("unknown log level %s", tostring(level))) end
  return value
end

local function default_logger(level, message)
  io.stderr:write("libqueue ", level, ": ", message, "\n")
end

local logger = default_logger
local min_level = LOG_LEVELS.warning
local capturing = true

--- Hands `message` at `level` (an integer) to the logger, if at or above
-- its level; a logger that fails is reported on stderr.
local function emit(level, message)
  if level < min_level then return end
  local ok, err = pcall(logger, LEVEL_NAMES[level] or tostring(level), message)
  if not ok then
    io.stderr:write("libqueue: the logger failed: ", tostring(err), "\n")
  end
end
L.emit = emit

--- Hands queued core messages to the logger. The binding calls it on every
-- call into the core; call it yourself in a long pause of your own.
local function drain_log()
  if not capturing then return end
  local list = core.lq_lua_log_drain()
  if list then
    for i = 1, #list, 2 do emit(list[i], list[i + 1]) end
  end
end
L.drain_log = drain_log

--- set_logger(fn [, level]): fn(level_name, message) receives the messages at
-- or above `level` ("debug", "info", "warning" (default), "error").
-- set_logger(nil) restores the default (stderr). set_logger(false) gives the
-- core back its own stderr logging, for embedders that install their own
-- lq_set_log sink from C (the core has one sink per process).
function L.set_logger(fn, level)
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

--- Free an Owned options set (or nil) and pass the values through.
function L.done(options, ...)
  if options then options:free() end
  drain_log()
  return ...
end

return L
