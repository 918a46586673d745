-- What the Lua suite uses of Lua 5.3/5.4 that Lua 5.1 and LuaJIT lack, filled
-- in, so that the same test files run on every Lua the module is built for.
-- Before 5.3 every number is a double: one with an integer value counts as
-- an integer, as the module counts it.

local C = {}

--- Lua 5.3 and later: 64-bit integers (ids exact up to math.maxinteger);
-- before, exact up to 2^53.
C.INTEGERS = math.type ~= nil
--- Lua 5.4: to-be-closed variables.
C.CLOSE = _VERSION ~= "Lua 5.1" and _VERSION ~= "Lua 5.2" and _VERSION ~= "Lua 5.3"

if not math.type then
  function math.type(value)
    if type(value) ~= "number" then return nil end
    if value == math.floor(value) and value > -math.huge and value < math.huge then return "integer" end
    return "float"
  end
  function math.tointeger(value)
    if math.type(value) == "integer" then return value end
    return nil
  end
end
table.pack = table.pack or function(...) return { n = select("#", ...), ... } end
table.unpack = table.unpack or unpack

return C
