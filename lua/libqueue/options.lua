--- libqueue.options: option tables ({ pool_size = 4 }) made into the
-- core's lq_options sets, for open and subscribe.

local C = require("libqueue.base")
C.internal()

local core = C.core
local raise, check_type, own = C.raise, C.check_type, C.own

local type, pairs, tostring, next = type, pairs, tostring, next
local math_type, tointeger = C.math_type, C.tointeger
local format = string.format

local O = {}

-- The call that reads each scope's options.
local READERS = {
  [core.LQ_SCOPE_BROKER] = "open",
  [core.LQ_SCOPE_SUBSCRIPTION] = "subscribe",
  [core.LQ_SCOPE_SCHEDULE] = "schedule",
}

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
      return nil, m, c -- the core's message names the option and the value
    end
  end
  return true, options
end

return O
