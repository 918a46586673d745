# What `cmake --install` puts in the prefix, and how consumers find it:
# the header, both libraries, the CMake package (libqueueConfig.cmake with
# the exported targets libqueue::libqueue and libqueue::libqueue_static) and
# the pkg-config file libqueue.pc. tests/consumer builds against the result.

install(TARGETS libqueue libqueue_static EXPORT libqueueTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES libqueue/include/libqueue.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The CMake package. The config file looks up what the exported targets link
# (the static library's link interface names Threads::Threads and the
# PkgConfig:: targets of LqClientLibraries.cmake); it reads the dialect
# options through configure_package_config_file.
set(LQ_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/libqueue)
install(EXPORT libqueueTargets NAMESPACE libqueue::
  DESTINATION ${LQ_CMAKE_PACKAGE_DIR})
include(CMakePackageConfigHelpers)
configure_package_config_file(cmake/libqueueConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/libqueueConfig.cmake
  INSTALL_DESTINATION ${LQ_CMAKE_PACKAGE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/libqueueConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/libqueueConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/libqueueConfigVersion.cmake
  DESTINATION ${LQ_CMAKE_PACKAGE_DIR})

# The pkg-config file. Its prefix is the one installed to, which
# `cmake --install --prefix` can change after configuration: the file is
# configured here with everything but @LQ_PC_PREFIX@ (which stays as it is),
# and once more at install time, with the prefix then in effect.
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(LQ_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(LQ_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
set(LQ_PC_PREFIX "@LQ_PC_PREFIX@")
configure_file(cmake/libqueue.pc.in ${CMAKE_CURRENT_BINARY_DIR}/libqueue.pc.in @ONLY)
install(CODE "
  set(LQ_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${CMAKE_CURRENT_BINARY_DIR}/libqueue.pc.in\"
                 \"${CMAKE_CURRENT_BINARY_DIR}/libqueue.pc\" @ONLY)")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/libqueue.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
