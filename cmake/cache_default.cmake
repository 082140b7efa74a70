# comem_cache_default(VAR DEFAULT TYPE DOC): a cache entry that follows its default until someone sets it.
#
# A plain set(... CACHE ...) keeps what the first configure found. For a default that appears later
# (`make demo` configures before `make check` makes .venv), that first guess would stay for good. The
# entry follows DEFAULT for as long as it still holds the default it was given last; a value set by
# hand (-D, ccmake) differs from that and is kept.
function(comem_cache_default var default type doc)
  if(NOT DEFINED CACHE{${var}} OR "$CACHE{${var}}" STREQUAL "$CACHE{COMEM_DEFAULT_OF_${var}}")
    set(${var} "${default}" CACHE ${type} "${doc}" FORCE)
  endif()
  set(COMEM_DEFAULT_OF_${var} "${default}" CACHE INTERNAL "the default ${var} was last given")
endfunction()
