# The database client libraries the core is built with: SQLite always;
# PostgreSQL's libpq and MariaDB Connector/C (which serves MySQL and MariaDB)
# unless switched off, for a service that needs neither server and should not
# have to install their development packages.
#
# For the rest of the build this sets:
#   LQ_CLIENT_TARGETS       the PkgConfig:: imported targets the core links
#   LQ_CLIENT_DEFINITIONS   LQ_WITH_POSTGRESQL=1 / LQ_WITH_MYSQL=1 for the
#                           enabled ones (broker.c's scheme table reads them)
#   LQ_DISABLED_SOURCES     the dialect sources of the disabled ones, left out
#                           of the build
#   LQ_PC_LIBS_PRIVATE      the flags that link the enabled ones, for the
#                           Libs.private of libqueue.pc (see libqueue.pc.in)
#   LQ_PC_CLIENT_LIBS       their library names, a list (tests/consumer checks
#                           libqueue.pc against it)
# libqueueConfig.cmake.in looks the same modules up again, by the same names
# (the exported static target refers to PkgConfig::<name>).

option(LQ_WITH_POSTGRESQL "Build the PostgreSQL dialect (needs libpq)" ON)
option(LQ_WITH_MYSQL "Build the MySQL/MariaDB dialect (needs libmariadb)" ON)

# The oldest SQLite the dialect accepts (RETURNING); it checks at run time too.
set(LQ_SQLITE3_MIN_VERSION 3.35)

# libqueue.pc links a client library by the flags pkg-config gave the build:
# -l for each library, -L for a directory the linker does not search anyway.
macro(lq_add_pc_libs prefix)
  foreach(_lq_dir IN LISTS ${prefix}_LIBRARY_DIRS)
    string(REGEX REPLACE "(.)/+$" "\\1" _lq_dir "${_lq_dir}")
    if(NOT _lq_dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      string(APPEND LQ_PC_LIBS_PRIVATE " -L${_lq_dir}")
    endif()
  endforeach()
  foreach(_lq_lib IN LISTS ${prefix}_LIBRARIES)
    string(APPEND LQ_PC_LIBS_PRIVATE " -l${_lq_lib}")
    list(APPEND LQ_PC_CLIENT_LIBS ${_lq_lib})
  endforeach()
endmacro()

find_package(PkgConfig REQUIRED)
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3>=${LQ_SQLITE3_MIN_VERSION})
set(LQ_CLIENT_TARGETS PkgConfig::SQLITE3)
set(LQ_CLIENT_DEFINITIONS "")
set(LQ_DISABLED_SOURCES "")
set(LQ_PC_LIBS_PRIVATE "")
set(LQ_PC_CLIENT_LIBS "")
lq_add_pc_libs(SQLITE3)

if(LQ_WITH_POSTGRESQL)
  pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)
  list(APPEND LQ_CLIENT_TARGETS PkgConfig::LIBPQ)
  list(APPEND LQ_CLIENT_DEFINITIONS LQ_WITH_POSTGRESQL=1)
  lq_add_pc_libs(LIBPQ)
else()
  list(APPEND LQ_DISABLED_SOURCES ${PROJECT_SOURCE_DIR}/libqueue/src/dialects/postgres.c)
endif()

if(LQ_WITH_MYSQL)
  pkg_check_modules(MARIADB REQUIRED IMPORTED_TARGET libmariadb)
  list(APPEND LQ_CLIENT_TARGETS PkgConfig::MARIADB)
  list(APPEND LQ_CLIENT_DEFINITIONS LQ_WITH_MYSQL=1)
  lq_add_pc_libs(MARIADB)
else()
  list(APPEND LQ_DISABLED_SOURCES ${PROJECT_SOURCE_DIR}/libqueue/src/dialects/mysql.c)
endif()

set(_lq_dialects sqlite)
if(LQ_WITH_POSTGRESQL)
  list(APPEND _lq_dialects postgresql)
endif()
if(LQ_WITH_MYSQL)
  list(APPEND _lq_dialects mysql)
endif()
list(JOIN _lq_dialects ", " _lq_dialects)
message(STATUS "libqueue dialects: ${_lq_dialects}")
