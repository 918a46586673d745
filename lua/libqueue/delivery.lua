--- libqueue.delivery: Delivery, one claimed row handed out by a
-- subscription: its fields, read lazily from the row and kept, its
-- settlements (ack, retry, retry_after, dead_letter), execute in
-- transactional mode, and release.

local C = require("libqueue.base")
C.internal()
local log = require("libqueue.log")

local core = C.core
local raise, argerror, check_type, misuse = C.raise, C.argerror, C.check_type, C.misuse
local drain_log, done = log.drain_log, log.done

local type, pairs, setmetatable, tostring, rawget, rawset =
      type, pairs, setmetatable, tostring, rawget, rawset
local tointeger, pack, new_object = C.tointeger, C.pack, C.new_object
local format = string.format

local D = {}

local Delivery = {}
Delivery.__name = "libqueue.delivery"
D.Delivery = Delivery

--- A Delivery of `subscription` for the core's delivery `ptr`.
function D.new(ptr, subscription)
  return new_object({ _ptr = ptr, subscription = subscription, settled = false }, Delivery)
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
--- Whether the run passed the subscription's timeout_ms and its row went
-- back: the handler may give up, its settlement changes nothing.
function Delivery:expired() return core.lq_delivery_expired(live(self)) end
--- True once the row was cancelled while this run held it (broker:cancel):
-- seen at a lease extension in the lease form, at the settlement in the
-- advisory form. Its settlement changes nothing.
function Delivery:cancelled() return core.lq_delivery_cancelled(live(self)) end

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
  local params = pack(...)
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

return D
