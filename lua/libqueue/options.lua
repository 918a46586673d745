--- libqueue.options: option tables ({ pool_size = 4 }) made into the
-- core's lq_options sets, for open and subscribe.

local C = require("libqueue.base")
C.internal()

local core = C.core
local raise, check_type, own, check_value = C.raise, C.check_type, C.own, C.check_value

local type, pairs, tostring, next = type, pairs, tostring, next
local tointeger = C.tointeger
local format = string.format

local O = {}

-- The call that reads each scope's options.
local READERS = {
  [core.LQ_SCOPE_BROKER] = "open",
  [core.LQ_SCOPE_SUBSCRIPTION] = "subscribe",
  [core.LQ_SCOPE_SCHEDULE] = "schedule",
}

--- The Lua type of each integer option: a flag (one the core refuses 2 for:
-- listen_notify, transactional, coalesce) takes a boolean too, any other an
-- integer alone (pool_size = true is no pool size). Asked of the core once
-- per option, on a set kept for the asking.
local INT_TYPES, probe = {}, nil
local function int_type(option)
  local known = INT_TYPES[option]
  if known then return known end
  if not probe then
    local ptr = core.lq_options_new()
    if not ptr then return "integer" end
    probe = own(ptr, core.lq_options_free)
  end
  local flag = core.lq_options_set_int(probe.ptr, option, 1)
               and not core.lq_options_set_int(probe.ptr, option, 2)
  known = flag and "integer|boolean" or "integer"
  INT_TYPES[option] = known
  return known
end

--- An lq_options set (Owned) from an option table, or nil for none, for the
-- call `fname` ("open", "subscribe" or "schedule"). Names go through
-- lq_option_find, so any option the core knows works here; an option another
-- call reads is refused. Returns true, the set (nil for none), or nil,
-- message, code.
function O.build_options(opts, fname)
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
    local reader = READERS[core.lq_option_scope_of(option)]
    if reader ~= fname then
      options:free()
      return nil, format("option %s belongs to %s, not to %s", name, reader, fname), "LQ_MISUSE"
    end
    local expected = kind == core.LQ_OPTION_STRING and "string" or int_type(option)
    local ok, m, c = check_value(value, expected, format("option '%s'", name))
    if not ok then
      options:free()
      return nil, m, c
    end
    if kind == core.LQ_OPTION_STRING then
      ok, m, c = core.lq_options_set_str(options.ptr, option, value)
    else
      if type(value) == "boolean" then value = value and 1 or 0 end
      ok, m, c = core.lq_options_set_int(options.ptr, option, tointeger(value))
    end
    if not ok then
      options:free()
      return nil, m, c -- the core's message names the option and the value
    end
  end
  return true, options
end

return O
