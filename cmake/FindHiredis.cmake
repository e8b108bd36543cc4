# FindHiredis: makes the imported target hiredis::hiredis.
# Debian's hiredis 0.14 ships a HiredisConfig.cmake without an imported target,
# so this module finds the header and library itself. Installed beside
# limitcounterConfig.cmake so that consumers of the installed package get it too.
#
# Sets Hiredis_FOUND, Hiredis_INCLUDE_DIR, Hiredis_LIBRARY, Hiredis_VERSION.
find_path(Hiredis_INCLUDE_DIR NAMES hiredis/hiredis.h)
find_library(Hiredis_LIBRARY NAMES hiredis)

if(Hiredis_INCLUDE_DIR AND EXISTS "${Hiredis_INCLUDE_DIR}/hiredis/hiredis.h")
  file(STRINGS "${Hiredis_INCLUDE_DIR}/hiredis/hiredis.h" version_lines
       REGEX "^#define HIREDIS_(MAJOR|MINOR|PATCH) [0-9]+")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define HIREDIS_${part} ([0-9]+).*" "\\1" Hiredis_${part} "${version_lines}")
  endforeach()
  set(Hiredis_VERSION "${Hiredis_MAJOR}.${Hiredis_MINOR}.${Hiredis_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Hiredis
  REQUIRED_VARS Hiredis_LIBRARY Hiredis_INCLUDE_DIR
  VERSION_VAR Hiredis_VERSION)

if(Hiredis_FOUND AND NOT TARGET hiredis::hiredis)
  add_library(hiredis::hiredis UNKNOWN IMPORTED)
  set_target_properties(hiredis::hiredis PROPERTIES
    IMPORTED_LOCATION "${Hiredis_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Hiredis_INCLUDE_DIR}")
endif()
mark_as_advanced(Hiredis_INCLUDE_DIR Hiredis_LIBRARY)
