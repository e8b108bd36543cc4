# Warnings (as errors where LIMITCOUNTER_WERROR) and sanitizers, applied to our
# own targets only: a consumer's flags are never touched.
function(limitcounter_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                                           -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast)
  if(LIMITCOUNTER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(LIMITCOUNTER_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${LIMITCOUNTER_SANITIZE} -fno-omit-frame-pointer
                                             -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${LIMITCOUNTER_SANITIZE})
  endif()
  if(LIMITCOUNTER_BUILD_FUZZERS)
    # coverage feedback for libFuzzer from the library's own code
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()
