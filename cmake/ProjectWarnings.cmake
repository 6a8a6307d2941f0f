# Warnings for Tessera's own targets (never applied to third-party or generated code).
function(tessera_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor
                                           -Wformat=2 -Wimplicit-fallthrough)
  # A sanitizer build keeps our assertions (and the libraries' header assertions, e.g.
  # nlohmann::json's on a const operator[] of a missing key): they abort the test instead of
  # reading garbage. RelWithDebInfo's -DNDEBUG comes first on the command line; -U undoes it.
  if(TESSERA_SANITIZE)
    target_compile_options(${target} PRIVATE -UNDEBUG)
  endif()
endfunction()
