-- broker:doctor: the table's health as JSON text on every database; a
-- dropped claim-order index is named as a problem; a missing table, a
-- closed broker and a bad argument are refused.
local H = require("harness")
local eq, ok, fails = H.eq, H.ok, H.fails

-- The level of one check in the JSON (the core writes "check" then "level").
local function level_of(json, check)
  return json:match('"check":"' .. check .. '","level":"(%a+)"')
end

local DROP_INDEX = {
  sqlite = 'DROP INDEX "jobs_claim_order"',
  -- A lease table's claims walk the free rows' index on PostgreSQL
  -- (docs/claim-index.md): without an index, neither is left.
  postgresql = 'DROP INDEX "jobs_claim_order", "jobs_claim_free"',
  mysql = "DROP INDEX jobs_claim_order ON jobs",
}

-- The index the claims of the lease table walk.
local CLAIM_INDEX = { sqlite = "jobs_claim_order", postgresql = "jobs_claim_free", mysql = "jobs_claim_order" }

H.case("doctor reads the table's health", { forms = { "lease" } }, function(db, form)
  local tbl = H.make_table(form, { retry_after = "retry_after" })
  local broker = H.open(db)
  ok(broker:create_table(tbl))
  local json = ok(broker:doctor(tbl))
  H.truthy(json:find('"dialect":"' .. db.dialect .. '"', 1, true), "the dialect: " .. json)
  H.truthy(json:find('"table":"jobs"', 1, true), "the table: " .. json)
  eq(level_of(json, "claim_order_index"), "ok", "the index lq_table_create made")
  H.truthy(json:find('"value":"' .. CLAIM_INDEX[db.dialect] .. '"', 1, true), "the index named: " .. json)
  db:exec(DROP_INDEX[db.dialect])
  json = ok(broker:doctor(tbl))
  eq(level_of(json, "claim_order_index"), "problem", "the index dropped: " .. json)
  H.truthy(json:find("CREATE INDEX", 1, true), "the advice says how to make it: " .. json)
  fails("LQ_SCHEMA", broker:doctor(H.make_table(form, { name = "missing" })))
  H.raises("doctor", function() broker:doctor("jobs") end)
  broker:close()
  fails("LQ_CLOSED", broker:doctor(tbl))
end)

H.run()
