# Warnings for Tessera's own targets (never applied to third-party or generated code).
function(tessera_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor
                                           -Wformat=2 -Wimplicit-fallthrough)
endfunction()
