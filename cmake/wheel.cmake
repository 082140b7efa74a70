# cmake/wheel.cmake - what a wheel holds (scikit-build-core sets SKBUILD; pyproject.toml), in place
# of cmake/install.cmake. The install prefix is the wheel's platlib, where the Python package
# python/comem lands as comem/; the native files go inside it:
#
#   comem/_native/lib/libcomem.so.0          the library the binding loads first (comem/_lib.py)
#   comem/_native/lib/libcomem_preload.so    `comem run`'s preload, found as ../lib beside bin/comem
#   comem/_native/bin/comem, comemd          the CLI and the daemon; the console scripts `comem` and
#                                            `comemd` exec them (comem/_bin.py)
#   comem/_native/build-info.json            the version, json-c, and the newest glibc symbol
#                                            version these files need: the binding's message when
#                                            the system's glibc is older
#
# The man pages go to the wheel's data (share/man/man1 and man8 of the environment it is installed
# in, where man finds them beside the environment's bin/: `man comem`, as `comem --help` says), the
# README, docs/*.md (docs/json.md is what `comem --help` names for --json) and the scenarios
# `comem simulate` replays to share/doc/comem of that environment, as `make install` lays them out.
# No headers, pkg-config file or systemd unit: those are `make install`'s. json-c is
# linked in statically (COMEM_JSONC_STATIC, which pyproject.toml sets), so the files need nothing
# beyond glibc (libc, libm, ld-linux): what a manylinux tag allows (docs/install.md).
set(COMEM_WHEEL_NATIVE comem/_native)

install(TARGETS comem LIBRARY DESTINATION ${COMEM_WHEEL_NATIVE}/lib NAMELINK_SKIP)
install(TARGETS comem_cli comemd RUNTIME DESTINATION ${COMEM_WHEEL_NATIVE}/bin)
install(FILES ${CMAKE_SOURCE_DIR}/docs/man/comem.1 DESTINATION ${SKBUILD_DATA_DIR}/share/man/man1)
install(FILES ${CMAKE_SOURCE_DIR}/docs/man/comemd.8 DESTINATION ${SKBUILD_DATA_DIR}/share/man/man8)
file(GLOB _comem_wheel_docs ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${_comem_wheel_docs} DESTINATION ${SKBUILD_DATA_DIR}/share/doc/comem)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/scenarios/ DESTINATION ${SKBUILD_DATA_DIR}/share/doc/comem/scenarios
        FILES_MATCHING PATTERN "*.scn")

# build-info.json, written at install time from the installed (stripped) files themselves.
function(comem_wheel_build_info)
  if(COMEM_JSONC_STATIC)
    set(_jsonc "${JSONC_VERSION}, static")
  else()
    set(_jsonc "${JSONC_VERSION}, shared (libjson-c.so.5 from the system)")
  endif()
  install(CODE "
    set(_native \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${COMEM_WHEEL_NATIVE}\")
    file(GLOB _files \"\${_native}/bin/*\" \"\${_native}/lib/*.so*\")
    set(_glibc 0)
    foreach(_f IN LISTS _files)
      execute_process(COMMAND \"${CMAKE_READELF}\" -V --wide \"\${_f}\" OUTPUT_VARIABLE _out RESULT_VARIABLE _rc)
      if(NOT _rc EQUAL 0)
        message(FATAL_ERROR \"comem: readelf -V \${_f} failed\")
      endif()
      string(REGEX MATCHALL \"GLIBC_[0-9]+\\\\.[0-9]+(\\\\.[0-9]+)?\" _vers \"\${_out}\")
      foreach(_v IN LISTS _vers)
        string(REPLACE \"GLIBC_\" \"\" _v \"\${_v}\")
        if(_v VERSION_GREATER _glibc)
          set(_glibc \"\${_v}\")
        endif()
      endforeach()
    endforeach()
    if(_glibc STREQUAL 0)
      message(FATAL_ERROR \"comem: found no GLIBC_ symbol version in \${_files}\")
    endif()
    file(WRITE \"\${_native}/build-info.json\"
         \"{\\\"version\\\": \\\"${PROJECT_VERSION}\\\", \\\"glibc\\\": \\\"\${_glibc}\\\", \\\"json_c\\\": \\\"${_jsonc}\\\"}\\n\")
    message(STATUS \"comem: the wheel's native files need glibc >= \${_glibc}\")
  ")
endfunction()
