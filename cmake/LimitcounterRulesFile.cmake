# limitcounter::rules_file: RuleSet from and to YAML (include/limitcounter/rules_file.hpp,
# docs/RULES.md). A library of its own so that only hosts that read rule files link yaml-cpp.
#
# Installed with the package as the component `rules_file`:
#   find_package(limitcounter REQUIRED COMPONENTS rules_file)
#   target_link_libraries(app PRIVATE limitcounter::rules_file)
find_package(yaml-cpp REQUIRED) # Debian: libyaml-cpp-dev; its imported target is `yaml-cpp`

file(GLOB LIMITCOUNTER_RULES_FILE_SOURCES CONFIGURE_DEPENDS
     "${PROJECT_SOURCE_DIR}/src/rules_file/*.cpp")
add_library(limitcounter_rules_file ${LIMITCOUNTER_RULES_FILE_SOURCES}
            "${PROJECT_SOURCE_DIR}/include/limitcounter/rules_file.hpp"
            "${PROJECT_SOURCE_DIR}/include/limitcounter/rule_store.hpp")
add_library(limitcounter::rules_file ALIAS limitcounter_rules_file)
set_target_properties(limitcounter_rules_file PROPERTIES
  EXPORT_NAME rules_file
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  POSITION_INDEPENDENT_CODE ON)
# The public header includes only <limitcounter/rule.hpp>: yaml-cpp stays private.
target_link_libraries(limitcounter_rules_file PUBLIC limitcounter PRIVATE yaml-cpp)
# The rule store runs lua/rule_store_put.lua: the scripts header generated for the core.
target_include_directories(limitcounter_rules_file PRIVATE "${PROJECT_BINARY_DIR}/generated")
limitcounter_set_warnings(limitcounter_rules_file)

if(LIMITCOUNTER_INSTALL)
  install(TARGETS limitcounter_rules_file EXPORT limitcounterRulesFileTargets
          ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT limitcounter_development
          LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT limitcounter_runtime
                  NAMELINK_COMPONENT limitcounter_development
          RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT limitcounter_runtime)
  # Exported apart from the core targets: limitcounterConfig.cmake includes this file only
  # when the component is asked for, so a consumer of the core never needs yaml-cpp.
  install(EXPORT limitcounterRulesFileTargets
          NAMESPACE limitcounter::
          FILE limitcounterRulesFileTargets.cmake
          DESTINATION "${LIMITCOUNTER_INSTALL_CMAKEDIR}"
          COMPONENT limitcounter_development)
endif()
