# The version is written once, in the public header (LQ_VERSION_MAJOR, _MINOR
# and _PATCH of libqueue/include/libqueue.h): the C library, its pkg-config
# and CMake package files take it from here, and the Python package's build
# (python/setup.py) reads the same three lines.
#
# Sets LQ_VERSION ("major.minor.patch") for project(). Included before
# project(), so it uses nothing project() sets.

set(_lq_header "${CMAKE_CURRENT_LIST_DIR}/../libqueue/include/libqueue.h")
file(STRINGS "${_lq_header}" _lq_version_lines REGEX "^#define LQ_VERSION_(MAJOR|MINOR|PATCH) ")
set(LQ_VERSION "")
foreach(_lq_part MAJOR MINOR PATCH)
  string(REGEX MATCH "LQ_VERSION_${_lq_part} ([0-9]+)" _lq_found "${_lq_version_lines}")
  if(_lq_found STREQUAL "")
    message(FATAL_ERROR "${_lq_header}: no \"#define LQ_VERSION_${_lq_part} <number>\" line")
  endif()
  list(APPEND LQ_VERSION "${CMAKE_MATCH_1}")
endforeach()
string(REPLACE ";" "." LQ_VERSION "${LQ_VERSION}")
# A new version in the header configures the build again.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_lq_header}")
