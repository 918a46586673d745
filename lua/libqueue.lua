--- libqueue: task queues kept in a service's own SQL tables (Lua 5.4 binding).
--
--     local libqueue = require("libqueue")
--     local jobs = assert(libqueue.table{ name = "jobs", payload = "payload",
--                                         attempt = "attempt", locked_until = "locked_until" })
--     local broker = assert(libqueue.open("sqlite:jobs.db", { pool_size = 4 }))
--     assert(broker:publish(jobs, '{"image": "cat.png"}'))
--     local sub = assert(broker:subscribe(jobs, { poll_interval_ms = 50 }))
--     sub:run(function(delivery) resize(delivery.payload) end, { timeout = 1 })
--     sub:close(); broker:close()
--
-- Errors. Every method that can fail returns its result (true when there is
-- nothing else to return) on success, and on failure
--     nil, message, code_name [, sqlstate, native]
-- with code_name the C status name ("LQ_LEASE_LOST", "LQ_SCHEMA", ...), like
-- luasocket and luv. Arguments of the wrong Lua type (a number for a table
-- name, a table for a payload) are programming errors and raise with error(),
-- as the standard library does; a field of an option table of the wrong type
-- (fifo = "yes") fails with LQ_MISUSE, naming the field and its type. Two places cannot return nil, message: the
-- `deliveries` iterator raises on failures other than a timeout or a stopped
-- subscription, and reading a field of a released delivery raises.
--
-- Threads. Lua handlers always run on the calling thread: the binding uses the
-- core's pull API (lq_subscription_next) only. The core's own threads claim
-- ahead and extend the lease of every delivery held, so a slow handler keeps
-- its row for as long as it runs. sub:run hands the acks and retries that
-- follow a handler's return to threads of the module's own (the settler,
-- lua/lq_lua_settler.c), which never enter Lua, and pulls the next delivery
-- while they work: `workers` deliveries are settled at once, as in C.
--
-- Memory. Tables, brokers, subscriptions and deliveries are freed by the
-- garbage collector, in any order (the core keeps a broker alive while a
-- subscription of it lives, and a subscription while a pulled delivery of it
-- lives), or at once by close()/release(), also usable as <close> variables.
-- Each handle is freed exactly once.
--
-- Layout. This file assembles the module from its parts in libqueue/, one
-- idea each, layered as the C sources are (each requires only those above):
--     libqueue.base          libqueue.core (the C module), version, enums, status names, errors
--     libqueue.log           the logger, drain_log, set_logger
--     libqueue.options       option tables -> lq_options
--     libqueue.table         Table (libqueue.table)
--     libqueue.delivery      Delivery
--     libqueue.subscription  Subscription: next, deliveries, health, run
--     libqueue.broker        Broker (libqueue.open): create_table, publish, subscribe
-- The parts are internal: require("libqueue") is the module.

local C = require("libqueue.base")
C.internal()
local log = require("libqueue.log")
local table_part = require("libqueue.table")
local delivery = require("libqueue.delivery")
local subscription = require("libqueue.subscription")
local broker = require("libqueue.broker")

local M = {}

--- The raw SWIG module (every function and constant of libqueue.h). Handles
-- it returns are not garbage collected: free them with the lq_*_free/close
-- function named in the header.
M.core = C.core

--- The version of the linked core ("1.2.3"), and the one of the header the
-- module was built with.
M.version, M.header_version = C.version, C.header_version

--- Status codes: M.status.LQ_LEASE_LOST == 12, and back: M.status[12] == "LQ_LEASE_LOST".
M.status = C.status
--- name (lower case, without prefix) -> value: roles.payload, isolations.serializable, ...
M.roles, M.isolations, M.stats, M.log_levels = C.ROLES, C.ISOLATIONS, C.STATS, C.LOG_LEVELS

M.drain_log = log.drain_log
M.set_logger = log.set_logger

M.table = table_part.new
M.redact_url = broker.redact_url
M.open = broker.open
M.publish_sql = broker.publish_sql

M.Table, M.Broker, M.Subscription, M.Delivery =
  table_part.Table, broker.Broker, subscription.Subscription, delivery.Delivery

return M
