# install(): the public headers, the library, its exported targets (namespace limitcounter::),
# the package config with its version file, our FindHiredis.cmake beside them, and limitcounter.pc.
#
#   <prefix>/include/limitcounter/*.hpp
#   <prefix>/<libdir>/liblimitcounter.{a,so}
#   <prefix>/<libdir>/cmake/limitcounter/{limitcounterConfig,limitcounterConfigVersion,
#                                         limitcounterTargets*,FindHiredis}.cmake
#   <prefix>/<libdir>/pkgconfig/limitcounter.pc
include(CMakePackageConfigHelpers)

set(LIMITCOUNTER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/limitcounter"
    CACHE STRING "Where limitcounterConfig.cmake is installed (relative to the prefix)")
set(LIMITCOUNTER_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
    CACHE STRING "Where limitcounter.pc is installed (relative to the prefix)")
mark_as_advanced(LIMITCOUNTER_INSTALL_CMAKEDIR LIMITCOUNTER_INSTALL_PKGCONFIGDIR)

# A static library carries its private dependencies to the consumer's link line: the
# package config must find them, and pkg-config must name them. A shared one does not.
get_target_property(limitcounter_library_type limitcounter TYPE)
if(limitcounter_library_type STREQUAL "STATIC_LIBRARY")
  set(LIMITCOUNTER_STATIC ON)
else()
  set(LIMITCOUNTER_STATIC OFF)
endif()

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/limitcounter"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        COMPONENT limitcounter_development
        FILES_MATCHING PATTERN "*.hpp")
install(FILES "${PROJECT_BINARY_DIR}/include/limitcounter/version.hpp"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/limitcounter"
        COMPONENT limitcounter_development)

install(TARGETS limitcounter EXPORT limitcounterTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT limitcounter_development
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT limitcounter_runtime
                NAMELINK_COMPONENT limitcounter_development
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT limitcounter_runtime
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

install(EXPORT limitcounterTargets
        NAMESPACE limitcounter::
        FILE limitcounterTargets.cmake
        DESTINATION "${LIMITCOUNTER_INSTALL_CMAKEDIR}"
        COMPONENT limitcounter_development)

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/limitcounterConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/limitcounterConfig.cmake"
  INSTALL_DESTINATION "${LIMITCOUNTER_INSTALL_CMAKEDIR}")
# Which installed versions satisfy find_package(limitcounter X.Y). Semantic versioning: from
# 1.0 on, every version of the same major is compatible (SameMajorVersion). While the major is
# 0, a new minor version may break the API (semver's 0.y rule, and CHANGELOG.md says so), so
# only the same minor is compatible (SameMinorVersion): find_package(limitcounter 0.2) takes
# 0.2.z at or above the request, and refuses 0.1, 0.3 and 1.0.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(limitcounter_compatibility SameMinorVersion)
else()
  set(limitcounter_compatibility SameMajorVersion)
endif()
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/limitcounterConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY ${limitcounter_compatibility})
install(FILES "${PROJECT_BINARY_DIR}/limitcounterConfig.cmake"
              "${PROJECT_BINARY_DIR}/limitcounterConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/FindHiredis.cmake"
        DESTINATION "${LIMITCOUNTER_INSTALL_CMAKEDIR}"
        COMPONENT limitcounter_development)

# pkg-config. The file is relocatable: the prefix is derived from its own location
# (${pcfiledir}), so `cmake --install --prefix <anywhere>` yields a working file.
if(IS_ABSOLUTE "${LIMITCOUNTER_INSTALL_PKGCONFIGDIR}")
  set(LIMITCOUNTER_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH limitcounter_pc_to_prefix "/prefix/${LIMITCOUNTER_INSTALL_PKGCONFIGDIR}" "/prefix")
  string(REGEX REPLACE "/$" "" limitcounter_pc_to_prefix "${limitcounter_pc_to_prefix}")
  set(LIMITCOUNTER_PC_PREFIX "\${pcfiledir}/${limitcounter_pc_to_prefix}")
endif()
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(LIMITCOUNTER_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(LIMITCOUNTER_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()

# Threads is a public dependency (-pthread in Libs). A static library's own dependencies go
# in Libs itself, not Libs.private: liblimitcounter.a cannot link without them, and a plain
# `pkg-config --libs limitcounter` (no --static, as most Makefiles write it) must link the
# default build. No public header includes hiredis, fmt, date or OpenSSL, so a consumer needs their
# libraries only, no Cflags. (Requires would also pour hiredis.pc's Cflags,
# -I/usr/include/hiredis -D_FILE_OFFSET_BITS=64, into every consumer's compile line; and
# Debian's date-tz ships no .pc file.) A shared library has them linked in: Libs names
# only -llimitcounter.
if(LIMITCOUNTER_STATIC)
  set(LIMITCOUNTER_PC_DEPENDENCY_LIBS " -lhiredis -lfmt -ldate-tz -lssl -lcrypto")
else()
  set(LIMITCOUNTER_PC_DEPENDENCY_LIBS "")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/limitcounter.pc.in"
               "${PROJECT_BINARY_DIR}/limitcounter.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/limitcounter.pc"
        DESTINATION "${LIMITCOUNTER_INSTALL_PKGCONFIGDIR}"
        COMPONENT limitcounter_development)
