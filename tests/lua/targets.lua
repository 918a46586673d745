-- The databases the Lua suite runs on. Every test body takes a `db` made by
-- one of these targets and uses only this interface, so one body runs on each:
--
--   db.name, db.url, db.dialect  "sqlite", "sqlite:///tmp/.../queue.db", "sqlite"
--   db.past                      an SQL literal for a time long gone (backdating)
--   db:exec(sql)                 runs statements (";"-separated); raises on failure
--   db:query(sql)                rows as lists of strings (NULL is nil)
--   db:scalar(sql)               the first column of the first row, or nil
--   db:count(table[, where])     count(*) as an integer
--   db:quote(name)               a quoted identifier
--   db:hex(column)               SQL for the lower-case hex of a bytes column
--   db:text(column)              SQL reading a bytes column as UTF-8 text
--   db:param(i)                  the i-th placeholder of lq_delivery_exec
--   db:create(tbl)               CREATE TABLE from tbl:create_sql(db.dialect)
--   db:close()                   drops what the test made
--
-- SQLite runs always, on a file in a fresh temporary folder, driven through
-- the sqlite3 command-line tool (no Lua SQLite binding is needed). A server
-- target is one more entry of TARGETS, enabled by the environment variable
-- holding its URL: PostgreSQL when LQ_TEST_PG_URL is set (scripts/test starts
-- a private server and sets it), driven through psql. With
-- LQ_REQUIRE_SERVERS set, a server target without its URL fails the run.
-- LQ_LUA_TARGETS="sqlite,postgresql" picks targets by name (default: every
-- enabled one).

local T = {}

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
T.shell_quote = shell_quote

local function read_all(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  return data
end

local function write_all(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

--- Prefix of the commands of the helpers: the tools are not under test, and
-- the sanitizer build preloads its runtime into the suite (psql hangs with
-- it); a tool that hangs all the same fails its test after two minutes.
T.TOOL = "env -u LD_PRELOAD timeout 120 "

--- Runs `command` with `input` as its stdin; returns its output, or raises.
local function run_tool(command, input, what)
  local script, status_file = os.tmpname(), os.tmpname()
  write_all(script, input)
  -- The exit status through a file: Lua 5.1's pipe:close() does not give it.
  local pipe = assert(io.popen(T.TOOL .. command .. " < " .. shell_quote(script) .. " 2>&1; echo $? > "
                               .. shell_quote(status_file), "r"))
  local output = pipe:read("*a")
  pipe:close()
  local status = read_all(status_file):match("^(%d+)")
  os.remove(script)
  os.remove(status_file)
  if status ~= "0" then
    error(string.format("%s failed (exit status %s):\n%s\n-- input:\n%s", what, tostring(status),
                        output, input), 3)
  end
  return output
end

--- Lines of `sep`-separated fields; `null` marks SQL NULL.
local function parse_rows(output, sep, null)
  local rows = {}
  for line in output:gmatch("([^\n]*)\n") do
    local row, i = {}, 0
    for field in (line .. sep):gmatch("(.-)" .. sep:gsub("%p", "%%%0")) do
      i = i + 1
      if field ~= null then row[i] = field end
    end
    row.n = i
    rows[#rows + 1] = row
  end
  return rows
end

--- A lower-case name for the schema or database of a case, unique among the
-- cases running at once, of every process: made from the name of the case's
-- temporary folder (mktemp's, which exists while the case runs). Not from
-- math.random, which Lua 5.1 seeds alike in every process.
local function unique_name(dir)
  local base = assert(dir:match("([^/.]+)$"), "a temporary folder")
  return "lq_lua_" .. base:gsub(".", function(c) return string.format("%02x", c:byte()) end)
end

-- Shared by every target.
local Base = {}
Base.__index = Base

function Base:scalar(sql)
  local rows = self:query(sql)
  return rows[1] and rows[1][1]
end

function Base:count(name, where)
  return math.tointeger(tonumber(self:scalar(string.format("SELECT count(*) FROM %s WHERE %s",
                                                           self:quote(name), where or "1=1"))))
end

function Base:quote(name)
  return '"' .. name:gsub('"', '""') .. '"'
end

function Base:create(tbl)
  local sql = assert(tbl:create_sql(self.dialect))
  self:exec(sql)
  self.created[#self.created + 1] = tbl.name
end

---------------------------------------------------------------------------
-- SQLite: a file in a fresh temporary folder.

local SQLITE3 = os.getenv("LQ_SQLITE3") or "sqlite3"
local NULL = "\1NULL\1"

local Sqlite = setmetatable({}, Base)
Sqlite.__index = Sqlite

function Sqlite.new(dir)
  local path = dir .. "/queue.db"
  return setmetatable({ name = "sqlite", dialect = "sqlite", dir = dir, path = path,
                        url = "sqlite://" .. path, created = {},
                        past = "'2000-01-01T00:00:00.000+00:00'" }, Sqlite)
end

function Sqlite:run(sql)
  -- .timeout: the core's connections may hold the write lock for a moment.
  return run_tool(string.format("%s -batch -bail -noheader -list -separator '|' -nullvalue %s %s",
                                SQLITE3, shell_quote(NULL), shell_quote(self.path)),
                  ".timeout 30000\n" .. sql .. ";\n", "sqlite3")
end

function Sqlite:exec(sql) self:run(sql) end
function Sqlite:query(sql) return parse_rows(self:run(sql), "|", NULL) end
function Sqlite:hex(column) return "lower(hex(" .. self:quote(column) .. "))" end
function Sqlite:text(column) return "CAST(" .. self:quote(column) .. " AS TEXT)" end
function Sqlite:param() return "?" end
function Sqlite:close() end

---------------------------------------------------------------------------
-- PostgreSQL on a server given by LQ_TEST_PG_URL (as scripts/lib/servers.sh
-- exports it), through psql: each test gets a schema of its own, which the
-- core's URL selects with search_path, dropped at the end.

local PSQL = os.getenv("LQ_PSQL") or "psql"

local Postgres = setmetatable({}, Base)
Postgres.__index = Postgres

function Postgres.new(dir)
  local server = os.getenv("LQ_TEST_PG_URL")
  local schema = unique_name(dir)
  local sep = server:find("?", 1, true) and "&" or "?"
  local self = setmetatable({ name = "postgresql", dialect = "postgresql", server = server,
                              schema = schema, created = {},
                              url = server .. sep .. "options=-csearch_path%3D" .. schema,
                              past = "'2000-01-01T00:00:00+00:00'" }, Postgres)
  self:run("CREATE SCHEMA " .. self:quote(schema), true)
  return self
end

function Postgres:run(sql, no_schema)
  local prefix = "SET client_min_messages = warning;\n"
  if not no_schema then prefix = prefix .. "SET search_path TO " .. self:quote(self.schema) .. ";\n" end
  return run_tool(string.format("%s -X -q -A -t -F '|' -P null=%s -v ON_ERROR_STOP=1 -d %s",
                                PSQL, shell_quote(NULL), shell_quote(self.server)),
                  prefix .. sql .. ";\n", "psql")
end

function Postgres:exec(sql) self:run(sql) end
function Postgres:query(sql) return parse_rows(self:run(sql), "|", NULL) end
function Postgres:hex(column) return "encode(" .. self:quote(column) .. ", 'hex')" end
function Postgres:text(column) return "convert_from(" .. self:quote(column) .. ", 'UTF8')" end
function Postgres:param(i) return "$" .. i end
function Postgres:close()
  self:run("DROP SCHEMA " .. self:quote(self.schema) .. " CASCADE", true)
end

---------------------------------------------------------------------------
-- MariaDB (or MySQL) on a server given by LQ_TEST_MARIADB_URL, through the
-- mariadb client: each test gets a database of its own, dropped at the end.
-- The client's session reads double quotes as identifiers (ANSI_QUOTES), so
-- the suite's quoting holds, and keeps times in UTC, as the core does.

local MARIADB = os.getenv("LQ_MARIADB_CLIENT") or "mariadb"

local Mariadb = setmetatable({}, Base)
Mariadb.__index = Mariadb

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

function Mariadb.new(dir)
  local server = os.getenv("LQ_TEST_MARIADB_URL")
  local scheme, user, password, host, port =
    server:match("^(%a+)://([^:@/]*):?([^@/]*)@([^:/]+):?(%d*)/")
  assert(user, "cannot read LQ_TEST_MARIADB_URL")
  local database = unique_name(dir)
  local self = setmetatable({ name = "mysql", dialect = "mysql", created = {},
                              user = unescape(user), password = unescape(password), host = host,
                              port = port ~= "" and port or "3306", database = database,
                              url = string.format("%s://%s:%s@%s:%s/%s", scheme, user, password,
                                                  host, port ~= "" and port or "3306", database),
                              past = "'2000-01-01 00:00:00'" }, Mariadb)
  self:run("CREATE DATABASE " .. database, true)
  return self
end

function Mariadb:run(sql, no_database)
  local prefix = "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES'); SET time_zone = '+00:00';\n"
  if not no_database then prefix = prefix .. "USE " .. self.database .. ";\n" end
  local out = run_tool(string.format("%s --no-defaults --batch --skip-column-names -h %s -P %s -u %s %s",
                                     MARIADB, shell_quote(self.host), self.port, shell_quote(self.user),
                                     self.password ~= "" and shell_quote("-p" .. self.password) or ""),
                       prefix .. sql .. ";\n", "mariadb")
  return out
end

function Mariadb:exec(sql) self:run(sql) end
function Mariadb:query(sql) return parse_rows(self:run(sql), "\t", "NULL") end
function Mariadb:hex(column) return "lower(hex(" .. self:quote(column) .. "))" end
function Mariadb:text(column) return "CAST(" .. self:quote(column) .. " AS CHAR)" end
function Mariadb:param() return "?" end
function Mariadb:close() self:run("DROP DATABASE " .. self.database, true) end

---------------------------------------------------------------------------

--- Every target: its name, the environment variable naming its server (none
-- for SQLite), the claim forms its dialect serves, and its factory(dir).
T.TARGETS = {
  { name = "sqlite", forms = { "lease", "advisory" }, new = Sqlite.new },
  { name = "postgresql", env = "LQ_TEST_PG_URL", forms = { "row_lock", "lease", "advisory" },
    new = Postgres.new },
  { name = "mysql", env = "LQ_TEST_MARIADB_URL", forms = { "row_lock", "lease", "advisory" },
    new = Mariadb.new },
}
for _, target in ipairs(T.TARGETS) do
  local url = target.env and os.getenv(target.env)
  target.enabled = target.env == nil or (url ~= nil and url ~= "")
end

--- The targets to run, by LQ_LUA_TARGETS or every enabled one.
function T.selected()
  local wanted = os.getenv("LQ_LUA_TARGETS")
  local require_servers = (os.getenv("LQ_REQUIRE_SERVERS") or "") ~= ""
  local out = {}
  for _, target in ipairs(T.TARGETS) do
    local pick = target.enabled
    if not pick and require_servers then
      error("LQ_REQUIRE_SERVERS is set but " .. target.env .. " is not", 0)
    end
    if wanted and wanted ~= "" then
      pick = ("," .. wanted .. ","):find("," .. target.name .. ",", 1, true) ~= nil
      if pick and not target.enabled then
        error("target " .. target.name .. " asked for by LQ_LUA_TARGETS is not configured", 0)
      end
    end
    if pick then out[#out + 1] = target end
  end
  return out
end

T.read_all, T.write_all = read_all, write_all

return T
