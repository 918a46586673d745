-- A small test harness for the Lua suite: plain Lua (5.1, LuaJIT, 5.3, 5.4;
-- compat.lua fills in what the older ones lack), no dependencies.
--
--   local H = require("harness")
--   H.case("ack deletes the row", { forms = H.FORMS }, function(db, form) ... end)
--   H.run()
--
-- Each case runs once per database target (targets.lua) and per form given,
-- with a fresh database (a new temporary folder for SQLite). Output is TAP;
-- the process exits non-zero when a case fails. LQ_LUA_FILTER=<substring>
-- runs only the cases whose name contains it.

local compat = require("compat")
local libqueue = require("libqueue")
local targets = require("targets")

local H = {}

--- 64-bit integers (Lua 5.3 on), to-be-closed variables (Lua 5.4).
H.INTEGERS, H.CLOSE = compat.INTEGERS, compat.CLOSE

H.libqueue = libqueue
--- Every form the target's dialect serves (SQLite: lease and advisory;
-- PostgreSQL also row_lock).
H.FORMS = setmetatable({}, { __name = "every form" })
--- How long a test waits for something that should happen "at once" (s).
H.WAIT_S = 10
--- Poll interval of the subscriptions in tests (ms).
H.POLL_MS = 50

local cases = {}

--- H.case(name, [options,] fn): options.forms is H.FORMS or a list of forms
-- to run with, as far as the target serves them (fn(db, form)); without it,
-- fn(db) runs once per target.
function H.case(name, options, fn)
  if fn == nil then options, fn = {}, options end
  cases[#cases + 1] = { name = name, forms = options.forms, fn = fn }
end

local function forms_of(case, target)
  if case.forms == nil then return { false } end
  if case.forms == H.FORMS then return target.forms end
  local out = {}
  for _, form in ipairs(case.forms) do
    for _, served in ipairs(target.forms) do
      if form == served then out[#out + 1] = form end
    end
  end
  return out
end

---------------------------------------------------------------------------
-- Assertions: raise with a message naming the values.

local function show(v)
  if type(v) == "string" then
    if #v > 80 then return string.format("%q...(%d bytes)", v:sub(1, 80), #v) end
    return string.format("%q", v)
  end
  return tostring(v)
end
H.show = show

function H.eq(got, want, what)
  if got ~= want then
    error(string.format("%s: got %s, want %s", what or "value", show(got), show(want)), 2)
  end
  return got
end

function H.truthy(v, what)
  if not v then error((what or "expected a true value") .. ", got " .. show(v), 2) end
  return v
end

--- Like assert, for the binding's `value` or `nil, message, code` returns.
function H.ok(value, message, code, ...)
  if value == nil or value == false then
    error(string.format("unexpected failure: %s (%s)", tostring(message), tostring(code)), 2)
  end
  return value, message, code, ...
end

--- Checks a failure return: nil, message, code == want_code; returns the message.
function H.fails(want_code, value, message, code)
  if value ~= nil then
    error(string.format("expected failure %s, got success %s", want_code, show(value)), 2)
  end
  if code ~= want_code then
    error(string.format("expected %s, got %s: %s", want_code, tostring(code), tostring(message)), 2)
  end
  H.truthy(type(message) == "string" and #message > 0, "a failure message")
  return message
end

--- Checks that fn(...) raises an error whose message contains `pattern`.
function H.raises(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then error("expected an error matching '" .. pattern .. "'", 2) end
  if not tostring(err):find(pattern, 1, true) then
    error(string.format("error %s does not contain '%s'", show(tostring(err)), pattern), 2)
  end
  return err
end

function H.same_list(got, want, what)
  H.eq(#got, #want, (what or "list") .. " length")
  for i = 1, #want do H.eq(got[i], want[i], string.format("%s[%d]", what or "list", i)) end
end

---------------------------------------------------------------------------
-- Helpers shared by the tests.

--- A table description of a form: lease (a locked_until column), advisory
-- (advisory_lock = "job-{id}" unless given) or row_lock, with payload and attempt
-- columns unless set to false.
function H.make_table(form, spec)
  spec = spec or {}
  local full = { name = "jobs", payload = "payload", attempt = "attempt" }
  for k, v in pairs(spec) do full[k] = v end
  if full.payload == false then full.payload = nil end
  if full.attempt == false then full.attempt = nil end
  if form == "lease" then
    if full.locked_until == nil then full.locked_until = "locked_until" end
  elseif form == "advisory" then
    if full.advisory_lock == nil then full.advisory_lock = "job-{" .. (full.id or "id") .. "}" end
  elseif form ~= "row_lock" then
    error("unknown form " .. tostring(form))
  end
  return H.ok(libqueue.table(full))
end

--- The same description under another name (a dead-letter table).
function H.renamed(tbl, name, spec)
  local full = { name = name, id = tbl.id, id_generated = tbl.id_generated }
  for role, column in pairs(tbl.columns) do full[role] = column end
  for k, v in pairs(spec or {}) do full[k] = v end
  return H.ok(libqueue.table(full))
end

--- The dead-letter table of `tbl`: the same columns, ids not generated (the
-- core moves rows with their ids; PostgreSQL's recommended
-- "GENERATED ALWAYS AS IDENTITY" column refuses them).
function H.dead_letter_table(tbl, name)
  return H.renamed(tbl, name or "jobs_dead", { id_generated = false })
end

function H.open(db, opts)
  return H.ok(libqueue.open(db.url, opts))
end

function H.subscribe(broker, tbl, opts)
  local all = { poll_interval_ms = H.POLL_MS }
  for k, v in pairs(opts or {}) do all[k] = v end
  return H.ok(broker:subscribe(tbl, all))
end

--- The next delivery, which must come within `timeout` seconds (default 5).
function H.one(sub, timeout)
  local d, message, code = sub:next(timeout or 5)
  if not d then
    error(string.format("no delivery within %ss: %s (%s)", timeout or 5, tostring(message),
                        tostring(code)), 2)
  end
  return d
end

--- Checks that nothing is delivered within `timeout` seconds (default 0.3).
function H.none(sub, timeout, what)
  local d, _, code = sub:next(timeout or 0.3)
  if d then
    local id = d.id
    d:release()
    error(string.format("%s: row %s was delivered", what or "expected no delivery", tostring(id)), 2)
  end
  H.eq(code, "LQ_TIMEOUT", "code of an empty next")
end

--- Collects log messages while fn runs; returns them as {level, message} pairs.
function H.capture_log(fn, level)
  local seen = {}
  libqueue.set_logger(function(lvl, message) seen[#seen + 1] = { lvl, message } end, level)
  local ok, err = pcall(fn)
  libqueue.drain_log()
  libqueue.set_logger(nil)
  if not ok then error(err, 0) end
  return seen
end

---------------------------------------------------------------------------
-- Running

local function make_tempdir()
  local pipe = assert(io.popen(targets.TOOL .. "mktemp -d /tmp/libqueue-lua.XXXXXX"))
  local dir = pipe:read("*l")
  pipe:close()
  assert(dir and dir ~= "", "mktemp -d failed")
  return dir
end

local function remove_tree(dir)
  if dir and dir:match("^/tmp/libqueue%-lua%.") then
    os.execute(targets.TOOL .. "rm -rf " .. targets.shell_quote(dir))
  end
end

function H.run()
  local filter = os.getenv("LQ_LUA_FILTER")
  local selected = targets.selected()
  local plan, failures, n = {}, 0, 0
  for _, target in ipairs(selected) do
    for _, case in ipairs(cases) do
      for _, form in ipairs(forms_of(case, target)) do
        local label = case.name .. " [" .. target.name .. (form and (", " .. form) or "") .. "]"
        if not filter or label:find(filter, 1, true) then
          plan[#plan + 1] = { target = target, case = case, form = form, label = label }
        end
      end
    end
  end
  io.write("1..", #plan, "\n")
  for _, item in ipairs(plan) do
    n = n + 1
    local dir = make_tempdir()
    local db
    local started = os.time()
    local ok, err = xpcall(function()
      db = item.target.new(dir)
      item.case.fn(db, item.form or nil)
    end, debug.traceback)
    -- Close what the case left open before its files go. LuaJIT's traces
    -- hold the closures they were recorded with (a handler, and through its
    -- upvalues a subscription): flushing them lets the collector have those.
    if jit then jit.flush() end
    collectgarbage("collect")
    collectgarbage("collect")
    libqueue.set_logger(nil)
    if db then pcall(db.close, db) end
    remove_tree(dir)
    if ok then
      io.write(string.format("ok %d - %s (%ds)\n", n, item.label, os.time() - started))
    else
      failures = failures + 1
      io.write(string.format("not ok %d - %s\n", n, item.label))
      io.write("# ", tostring(err):gsub("\n", "\n# "), "\n")
    end
    io.flush()
  end
  io.write(string.format("# %d of %d passed\n", n - failures, n))
  -- Failing by error() rather than os.exit: the interpreter then closes the
  -- state (finalizers run, so leaks show under valgrind and ASan) on every
  -- Lua, 5.1's os.exit having no way to.
  if #plan == 0 then error("no test case was selected", 0) end
  if failures > 0 then error(string.format("%d of %d failed", failures, n), 0) end
end

return H
