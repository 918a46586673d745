-- sub:fd() and sub:try_next() in an event loop: luv (Debian's lua-luv, built
-- for every Lua) waits on the descriptor while a timer of the same loop keeps
-- ticking, and takes what is ready without ever blocking the loop.

local H = require("harness")
local uv = require("luv")
local eq, ok, fails = H.eq, H.ok, H.fails

--- Runs the loop until stop() or `seconds`; an error raised in a callback
-- stops it and is raised here.
local function run_loop(seconds, setup)
  local failure
  local function guard(fn)
    return function(...)
      local good, err = xpcall(fn, debug.traceback, ...)
      if not good and not failure then
        failure = err
        uv.stop()
      end
    end
  end
  local deadline = uv.new_timer()
  deadline:start(math.floor(seconds * 1000), 0, function() failure = failure or "the loop timed out"; uv.stop() end)
  local handles = setup(guard)
  uv.run()
  for _, handle in ipairs(handles) do
    if not handle:is_closing() then handle:close() end
  end
  deadline:close()
  uv.run("nowait") -- let the closes complete
  if failure then error(failure, 0) end
end

H.case("a loop waits on fd() and takes with try_next() while its timer ticks", function(db)
  local tbl = H.make_table("lease")
  db:create(tbl)
  local broker = H.open(db)
  local sub = H.subscribe(broker, tbl)
  local fd = ok(sub:fd())
  eq(math.type(fd), "integer", "fd type")
  eq(ok(sub:fd()), fd, "the same descriptor every call")
  fails("LQ_TIMEOUT", sub:try_next())

  local ticks, wakeups_before, payloads, published = 0, 0, {}, false
  run_loop(H.WAIT_S, function(guard)
    local timer, poll = uv.new_timer(), uv.new_poll(fd)
    -- Publishes only after the loop has ticked a while waiting on the fd.
    timer:start(10, 10, guard(function()
      ticks = ticks + 1
      if ticks == 5 then
        ok(broker:publish_many(tbl, { "a", "b", "c" }))
        published = true
      end
    end))
    poll:start("r", guard(function(err)
      assert(not err, err)
      if not published then wakeups_before = wakeups_before + 1 end
      while true do
        local d, _, code = sub:try_next()
        if not d then
          eq(code, "LQ_TIMEOUT", "try_next with none ready")
          break
        end
        payloads[#payloads + 1] = d.payload
        ok(d:ack())
        d:release()
      end
      if #payloads == 3 then uv.stop() end
    end))
    return { timer, poll }
  end)
  eq(wakeups_before, 0, "wake-ups before anything was published")
  H.truthy(ticks >= 5, "the timer ticked while the loop waited")
  table.sort(payloads)
  H.same_list(payloads, { "a", "b", "c" }, "taken")
  eq(db:count("jobs"), 0, "rows left")

  -- Once stopped, the descriptor is readable for good and try_next says so.
  ok(sub:stop())
  local code
  run_loop(H.WAIT_S, function(guard)
    local poll = uv.new_poll(fd)
    poll:start("r", guard(function()
      code = select(3, sub:try_next())
      uv.stop()
    end))
    return { poll }
  end)
  eq(code, "LQ_CLOSED", "try_next after stop")
  sub:close()
  fails("LQ_CLOSED", sub:fd())
  fails("LQ_CLOSED", sub:try_next())
end)

H.run()
