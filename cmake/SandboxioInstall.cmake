# Installs the public headers, the static libraries, a CMake package (find_package(sandboxio)
# gives sandboxio::sandboxio) and a pkg-config file (pkg-config --cflags --libs sandboxio).
include(CMakePackageConfigHelpers)

get_property(SANDBOXIO_INSTALLED_LIBS GLOBAL PROPERTY SANDBOXIO_LIBS)
get_property(SANDBOXIO_HEADER_DIRS GLOBAL PROPERTY SANDBOXIO_HEADER_DIRS)

foreach(dir IN LISTS SANDBOXIO_HEADER_DIRS)
  install(DIRECTORY ${dir}/sandboxio DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.inc")
endforeach()

install(TARGETS ${SANDBOXIO_INSTALLED_LIBS} sandboxio EXPORT sandboxioTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT sandboxioTargets NAMESPACE sandboxio:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sandboxio)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sandboxioConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sandboxioConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sandboxio)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sandboxioConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sandboxioConfig.cmake ${PROJECT_BINARY_DIR}/sandboxioConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sandboxio)

# pkg-config: libraries in link order (dependents first).
set(SANDBOXIO_PC_LIBS "")
list(REVERSE SANDBOXIO_INSTALLED_LIBS)
foreach(lib IN LISTS SANDBOXIO_INSTALLED_LIBS)
  string(APPEND SANDBOXIO_PC_LIBS " -l${lib}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/sandboxio.pc.in ${PROJECT_BINARY_DIR}/sandboxio.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sandboxio.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/sandboxio)
