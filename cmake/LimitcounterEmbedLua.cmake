# Embeds every lua/*.lua into one generated header: its text as a raw string and
# the SHA1 that SCRIPT LOAD will return. Runs at configure time; editing a .lua
# file re-runs it (CMAKE_CONFIGURE_DEPENDS). PREFIX: a .lua file put before every
# script (a test build's guard of declared keys: it defines guard_keys), or empty.
#
# A script whose last line is "return main()" is also embedded as a Redis Functions library
# (docs/ARCHITECTURE.md, "Scripts as a Functions library"): its chunk runs once, at FUNCTION
# LOAD, and FCALL runs only main(). Such a script reads KEYS, ARGV, redis and string as locals
# of its chunk, which the build declares: bound from the globals at the top of the EVALSHA form,
# and set by the registered function's callback at each FCALL (Redis gives a function its keys
# and arguments as parameters, and the full `redis` and the libraries only while it runs: a
# library's chunk sees no global but a `redis` of register_function and log).
# The library registers the same callback twice: as its own name, and as "<name>_ro" flagged
# no-writes, which Redis runs also when its memory is full (scripts::<name>_read_only).
#
# A whole line "--#include <path>" (relative to DIRECTORY: shared/reversal_rules.lua) is
# replaced by that file's text: scripts share Lua sources this way (docs/ARCHITECTURE.md,
# "Shared Lua sources"). An included file includes nothing itself.
function(limitcounter_embed_lua_includes directory text_var)
  set(text "${${text_var}}")
  # (a directive is a whole line, never the first: a script begins with its contract)
  string(REGEX MATCHALL "\n--#include [^\n]+" directives "${text}")
  foreach(directive IN LISTS directives)
    string(REGEX REPLACE "^\n--#include " "" included "${directive}")
    set(included_file "${directory}/${included}")
    if(NOT EXISTS "${included_file}")
      message(FATAL_ERROR "${directive}: ${included_file} does not exist")
    endif()
    file(READ "${included_file}" included_text)
    if(included_text MATCHES "\n--#include ")
      message(FATAL_ERROR "${included_file} includes another file: one level only")
    endif()
    string(REPLACE "${directive}" "\n${included_text}" text "${text}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${included_file}")
  endforeach()
  set(${text_var} "${text}" PARENT_SCOPE)
endfunction()

function(limitcounter_embed_lua)
  cmake_parse_arguments(ARG "" "OUTPUT;DIRECTORY;PREFIX" "" ${ARGN})
  set(prefix "")
  if(ARG_PREFIX)
    file(READ "${ARG_PREFIX}" prefix)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${ARG_PREFIX}")
  endif()
  file(GLOB lua_files CONFIGURE_DEPENDS "${ARG_DIRECTORY}/*.lua")
  list(SORT lua_files)
  set(body "")
  set(names "")
  foreach(lua_file IN LISTS lua_files)
    get_filename_component(name "${lua_file}" NAME_WE)
    file(READ "${lua_file}" text)
    limitcounter_embed_lua_includes("${ARG_DIRECTORY}" text)
    set(library "")
    set(function_name "")
    if(text MATCHES "\nreturn main\\(\\)[ \n]*$")
      set(guarded "redis")
      set(guard_binding "")
      if(prefix)
        set(guarded "guard_keys(redis, KEYS)")
        set(guard_binding "redis = ${guarded}\n")
      endif()
      string(REGEX REPLACE "\nreturn main\\(\\)[ \n]*$" "\n" definitions "${text}")
      string(PREPEND text "local KEYS, ARGV, redis, string = KEYS, ARGV, redis, string\n${prefix}${guard_binding}")
      string(SHA1 sha1 "${text}")
      string(REPLACE "redis" "server" callback_redis "${guarded}")
      # (named by the SHA1 of the whole library but its name: a change to the wrapper below
      # alone makes a new name too, never a library of the same name that differs)
      set(library "#!lua name=@NAME@\n-- (the globals as they are when called: the full API while a function runs; a library's\n-- chunk sees only a `redis` of register_function and log, and no `string`)\nlocal function server_api()\n  return redis\nend\nlocal function string_library()\n  return string\nend\nlocal KEYS, ARGV, redis, string\n${prefix}${definitions}local function limitcounter_call(keys, args)\n  local server = server_api()\n  KEYS, ARGV, string = keys, args, string_library()\n  redis = ${callback_redis}\n  return main()\nend\nserver_api().register_function('@NAME@', limitcounter_call)\n-- (the same for the calls that write nothing: Redis runs a no-writes function also when its\n-- memory is full, where it refuses one that may write)\nserver_api().register_function({function_name = '@NAME@_ro', callback = limitcounter_call,\n                                flags = {'no-writes'}})\n")
      string(SHA1 library_sha1 "${library}")
      string(SUBSTRING "${library_sha1}" 0 16 version)
      set(function_name "limitcounter_${name}_${version}")
      string(REPLACE "@NAME@" "${function_name}" library "${library}")
    else()
      if(prefix)
        string(PREPEND text "${prefix}local redis = guard_keys(redis, KEYS)\n")
      endif()
      string(SHA1 sha1 "${text}")
    endif()
    if(text MATCHES "\\)LIMITCOUNTER_LUA\"")
      message(FATAL_ERROR "${lua_file} contains the raw-string delimiter )LIMITCOUNTER_LUA\"")
    endif()
    string(APPEND body "inline constexpr Script ${name}{\"${name}\", R\"LIMITCOUNTER_LUA(${text})LIMITCOUNTER_LUA\", \"${sha1}\", R\"LIMITCOUNTER_LUA(${library})LIMITCOUNTER_LUA\", \"${function_name}\"};\n\n")
    if(function_name)
      # the same script, called by its library's no-writes function (not in `all`: one file)
      string(APPEND body "inline constexpr Script ${name}_read_only{\"${name}_read_only\", ${name}.source, ${name}.sha1, ${name}.library, \"${function_name}_ro\", ${name}.function_name};\n\n")
    endif()
    list(APPEND names "&${name}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${lua_file}")
  endforeach()
  list(LENGTH names count)
  list(JOIN names ", " joined)
  set(content "// Generated from lua/*.lua by cmake/LimitcounterEmbedLua.cmake. Do not edit.\n#pragma once\n\n#include <array>\n\n#include <limitcounter/script.hpp>\n\n// (a script may be longer than the 65,536 characters the standard asks every compiler to take\n// in one literal; GCC and Clang take more, and -Wpedantic warns)\n#pragma GCC diagnostic push\n#pragma GCC diagnostic ignored \"-Woverlength-strings\"\n\nnamespace limitcounter::scripts {\n\n${body}inline constexpr std::array<const Script*, ${count}> all{${joined}};\n\n} // namespace limitcounter::scripts\n\n#pragma GCC diagnostic pop\n")
  # Written only when it changes, so that a reconfigure does not rebuild everything.
  set(old "")
  if(EXISTS "${ARG_OUTPUT}")
    file(READ "${ARG_OUTPUT}" old)
  endif()
  if(NOT old STREQUAL content)
    file(WRITE "${ARG_OUTPUT}" "${content}")
  endif()
endfunction()
