--- libqueue.subscription: Subscription, a broker's subscription to a table
-- (broker:subscribe): pulling deliveries (next, deliveries), the claims'
-- health, run and its settlers (the module's threads that ack and retry
-- what handlers return, lua/lq_lua_settler.c), stop, close and stat.

local C = require("libqueue.base")
C.internal()
local log = require("libqueue.log")
local new_delivery = require("libqueue.delivery").new

local core = C.core
local raise, argerror, check_type, misuse, closed, own =
      C.raise, C.argerror, C.check_type, C.misuse, C.closed, C.own
local STATS, LOG_LEVELS, HISTOGRAMS = C.STATS, C.LOG_LEVELS, C.HISTOGRAMS
local emit, drain_log, done = log.emit, log.drain_log, log.done

local type, setmetatable, tostring, xpcall = type, setmetatable, tostring, xpcall
local tointeger, new_object = C.tointeger, C.new_object
local format = string.format

local S = {}

local Subscription = {}
Subscription.__index = Subscription
Subscription.__name = "libqueue.subscription"
S.Subscription = Subscription

--- The deliveries a subscription opened with `opts` keeps in work at once:
-- its lanes under workers_by_key, else its workers.
local function workers_of(opts)
  if opts == nil then return 1 end
  local lanes = type(opts.workers_by_key) == "number" and tointeger(opts.workers_by_key)
  if lanes and lanes > 0 then return lanes end
  return type(opts.workers) == "number" and tointeger(opts.workers) or 1
end

--- A Subscription for the core's subscription `ptr`, opened by `broker` on
-- `tbl` with `opts` (see Broker:subscribe).
function S.new(ptr, broker, tbl, opts)
  return new_object({ _ptr = ptr, broker = broker, table = tbl, workers = workers_of(opts) },
                      Subscription)
end

--- Longest single wait in C, so that the interpreter's Ctrl-C hook runs.
local WAIT_SLICE_MS = 500

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

--- For event loops (cqueues, luv, copas, a poll of one's own): a file
-- descriptor (an integer) that is readable while a delivery is ready, and
-- for good once the subscription is stopped. Wait until it is readable, then
-- take deliveries with try_next() until it answers "LQ_TIMEOUT"; a wake-up
-- that finds none (another taker was first) just waits again. Never read
-- from it or close it: the subscription owns it and closes it in close(),
-- so stop watching it before. The first call starts the claims, as next()
-- does. Or nil, message, code ("LQ_CLOSED" once closed).
function Subscription:fd()
  local ptr = self._ptr
  if not ptr then return closed("subscription") end
  return done(nil, core.lq_subscription_fd(ptr))
end

--- The next delivery ready now, never waiting: the delivery, or nil,
-- message, "LQ_TIMEOUT" when none is ready, nil, message, "LQ_CLOSED" once
-- stopped. It never reports a failing claim in place of "LQ_TIMEOUT":
-- health() tells an outage. The delivery is the caller's, as from next().
function Subscription:try_next()
  local ptr = self._ptr
  if not ptr then return closed("subscription") end
  local d, m, c, s, n = core.lq_subscription_try_next(ptr)
  drain_log()
  if d then return new_delivery(d, self) end
  return nil, m, c, s, n
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

---------------------------------------------------------------------------
-- run and its settlers

-- What a handler raised, as text: its __tostring may raise in turn.
local function describe_error(err)
  if type(err) == "string" then return err end
  local ok, text = pcall(tostring, err)
  if ok and type(text) == "string" then return text end
  return format("a %s value, whose __tostring failed: %s", type(err),
                type(text) == "string" and text or type(text))
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

--- The loop of sub:run: pulls and hands each delivery to fn until `max`,
-- a timeout or a stop; returns handled, counts, or nil, message, code,
-- sqlstate, native when pulling failed.
local function handle_all(self, fn, timeout, max, retry_delay, settler)
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
    local ok, err = xpcall(function() return fn(d) end, debug.traceback)
    if not ok then
      counts.failed = counts.failed + 1
      emit(LOG_LEVELS.error, format("handler failed on row %s of %s (attempt %d); %s: %s",
                                    tostring(id), self.table.name, attempt,
                                    d.settled and "it had settled the row"
                                             or "the row is retried, or dead-lettered at max_attempts",
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
  return handled, counts
end

-- The options of run.
local RUN_OPTIONS = { timeout = true, max = true, retry_delay_ms = true, settlers = true }

-- The most settler threads run starts: the core's cap on a subscription's
-- workers (LQ_OPT_WORKERS, libqueue/src/base/options.c).
local SETTLERS_MAX = 4096

-- The latest due time the core writes, 9999-12-31T23:59:59.999Z in ms since
-- the epoch (LQ__TIME_MAX_MS, libqueue/src/base/clock.h): retry_after refuses
-- a negative delay, and one past it from now (lq__check_delay).
local TIME_MAX_MS = 253402300799999

--- Whether the core takes `ms` (an integer) as a delay now: its own check
-- (lq__check_delay, which lq_delivery_retry_after makes) through
-- lq_message_set_delay_ms, as the bound falls while time passes. A number
-- beyond both bounds never reaches it (nor its int64_t). Also returns the
-- core's message when it refuses.
local function delay_fits(ms)
  if ms < 0 or ms > TIME_MAX_MS then return false end
  local ptr = core.lq_message_new()
  if not ptr then return true end -- out of memory: left to retry_after
  local ok, m = core.lq_message_set_delay_ms(ptr, ms)
  core.lq_message_free(ptr)
  return ok == true, m
end

--- The longest delay now, in ms, as the core reports it in refusing
-- TIME_MAX_MS (as text, or nil when it cannot be had).
local function longest_delay()
  local _, m = delay_fits(TIME_MAX_MS)
  return type(m) == "string" and m:match("longest delay now is (%d+) ms") or nil
end

--- sub:run(fn [, { timeout = seconds, max = n, retry_delay_ms = ms, settlers = n }])
-- Pulls deliveries and calls fn(delivery) for each, on the calling thread.
-- Returning normally acks the delivery unless fn settled it; an error()
-- (with its traceback) is logged at level "error" and the delivery is retried
-- (retry_after(retry_delay_ms) when given: from 0 to the delay that puts the
-- row's due time at 9999-12-31T23:59:59.999Z). Those acks and retries run on
-- `settlers` threads of the module (at most 4096, as the core's workers)
-- while run pulls the next delivery. In the
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
-- or nil, message, code if pulling failed. A bad option raises before
-- anything is claimed.
function Subscription:run(fn, opts)
  check_type(fn, "function", 1, "run")
  if opts ~= nil then check_type(opts, "table", 2, "run") end
  opts = opts or {}
  for k in pairs(opts) do
    if not RUN_OPTIONS[k] then raise(format("run: unknown option '%s'", tostring(k))) end
  end
  -- Every option is checked before anything is claimed: a value the loop
  -- could not use would fail every delivery (a retry delay the core
  -- refuses leaves each row unsettled, its attempt unspent, so it comes
  -- back for good).
  local timeout, max, retry_delay = opts.timeout, opts.max, opts.retry_delay_ms
  if timeout ~= nil and not (type(timeout) == "number" and timeout >= 0) then -- also NaN
    raise(format("run: timeout must be a number of seconds >= 0, or nil for no limit; got %s",
                 tostring(timeout)))
  end
  if max ~= nil then
    max = type(max) == "number" and tointeger(max)
    if not max or max < 0 then
      raise(format("run: max must be an integer >= 0, or nil for no limit; got %s",
                   tostring(opts.max)))
    end
  end
  if retry_delay ~= nil then
    retry_delay = type(retry_delay) == "number" and tointeger(retry_delay)
    if not (retry_delay and delay_fits(retry_delay)) then
      raise(format("run: retry_delay_ms must be an integer from 0 to %s (ms: a retry is due by "
                   .. "9999-12-31T23:59:59.999Z at the latest); got %s",
                   longest_delay() or "the longest delay now", tostring(opts.retry_delay_ms)))
    end
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
  if not settlers or settlers < 0 or settlers > SETTLERS_MAX then
    raise(format("run: settlers must be an integer from 0 to %d; got %s", SETTLERS_MAX,
                 tostring(opts.settlers)))
  end
  -- Nil (settle here) with no settlers or no thread to be had.
  local settler = settlers > 0 and start_settler(settlers, self.table.name, together) or nil
  -- The settler is closed (every handed-over delivery settled) however the
  -- loop is left, an error included.
  local ok, handled, counts, c, s, n = pcall(handle_all, self, fn, timeout, max, retry_delay, settler)
  if not ok then
    if settler then settler:free() end
    error(handled, 0)
  end
  if not handled then
    if settler then settler:free() end
    return nil, counts, c, s, n
  end
  finish_settler(settler, counts)
  drain_log()
  return handled, counts
end

---------------------------------------------------------------------------
-- Lifetime and counters

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

--- A counter or gauge: "claims", "empty_claims", "delivered", "settled",
-- "acked", "retried", "dead_lettered", "in_work", "waiting", ... (every
-- LQ_STAT_ name, in lower case).
function Subscription:stat(name)
  local which = STATS[name]
  if not which then raise(format("unknown stat '%s'", tostring(name))) end
  local ptr = self._ptr
  if not ptr then return closed("subscription") end
  return core.lq_subscription_stat(ptr, which)
end

--- A snapshot of every stat and both histograms, read from memory (no
-- statement): { stats = {claims = n, acked = n, ...}, claim = histogram,
-- wait = histogram }, a histogram being { bounds = {0.001, ..., math.huge},
-- counts = {n1, ...} (per bucket, not cumulative), count = n, sum = seconds }.
function Subscription:metrics()
  local ptr = self._ptr
  if not ptr then return closed("subscription") end
  local m, msg, code = core.lq_subscription_metrics(ptr)
  if not m then return nil, msg, code end
  local out = { stats = {} }
  for name, which in pairs(STATS) do out.stats[name] = core.lq_metrics_stat(m, which) end
  for name, which in pairs(HISTOGRAMS) do
    local h = { bounds = {}, counts = {}, count = core.lq_metrics_count(m, which, -1),
                sum = core.lq_metrics_sum(m, which) }
    for i = 0, core.LQ_HISTOGRAM_BUCKETS - 1 do
      h.bounds[i + 1] = core.lq_histogram_bound(i)
      h.counts[i + 1] = core.lq_metrics_count(m, which, i)
    end
    out[name] = h
  end
  core.lq_metrics_free(m)
  return out
end

return S
