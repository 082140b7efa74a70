# cmake/install.cmake - what `cmake --install` (and `make install PREFIX=...`) puts where.
#
#   bin/comem, bin/comemd                     the CLI and the daemon
#   lib/libcomem.so.0 (+ .so, .a)              the library, versioned soname, and its static twin
#   include/comem/*.h                          the public headers
#   lib/pkgconfig/comem.pc                     pkg-config --cflags --libs comem
#   COMEM_PY_DEST/comem                        the Python binding (import comem; COMEM_PYTHON_DIR overrides)
#   share/man/man1/comem.1, man8/comemd.8      the manual pages
#   COMEM_SYSTEMD_USER_DIR/comemd.service      the systemd user unit, starting the installed comemd
#   share/doc/comem/                           README and the docs
include(GNUInstallDirs)

find_package(Python3 COMPONENTS Interpreter)
set(COMEM_PYTHON_DIR "" CACHE STRING
    "Where the Python package goes, relative to the prefix (empty: chosen from the prefix, below)")
if(COMEM_PYTHON_DIR)
  set(COMEM_PY_DEST "${COMEM_PYTHON_DIR}")
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(COMEM_PY_DEST "lib/python3/dist-packages") # Debian's own place for distribution packages
elseif(Python3_FOUND)
  set(COMEM_PY_DEST "lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/site-packages")
else()
  set(COMEM_PY_DEST "lib/python3/site-packages")
endif()
set(COMEM_SYSTEMD_USER_DIR "lib/systemd/user" CACHE STRING "Where the systemd user unit goes, relative to the prefix")

install(TARGETS comem LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development)
install(TARGETS comem_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS comem_cli comemd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/comem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# pkg-config: paths relative to the prefix the file is installed under (${pcfiledir}), so a
# tree moved or installed with DESTDIR still finds itself.
file(RELATIVE_PATH COMEM_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" COMEM_PC_TO_PREFIX "${COMEM_PC_TO_PREFIX}")
configure_file(cmake/comem.pc.in ${CMAKE_BINARY_DIR}/comem.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/comem.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY python/comem DESTINATION ${COMEM_PY_DEST}
        PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE)

install(FILES docs/man/comem.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES docs/man/comemd.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)

# The unit names the daemon by the absolute path it is installed at, which `cmake --install
# --prefix` may choose only now: the unit is written at install time. With DESTDIR (a package
# build) the path is the final one, without the staging directory.
install(CODE "
  set(_bindir \"${CMAKE_INSTALL_BINDIR}\")
  if(NOT IS_ABSOLUTE \"\${_bindir}\")
    set(_bindir \"\${CMAKE_INSTALL_PREFIX}/\${_bindir}\")
  endif()
  set(COMEM_COMEMD_PATH \"\${_bindir}/comemd\")
  # man: pages are found only on man's search path (/usr, /usr/local); elsewhere the unit names the
  # installed pages by file, so systemd-analyze verify and systemctl help find them as they are.
  set(_mandir \"${CMAKE_INSTALL_MANDIR}\")
  if(NOT IS_ABSOLUTE \"\${_mandir}\")
    set(_mandir \"\${CMAKE_INSTALL_PREFIX}/\${_mandir}\")
  endif()
  if(\"\${CMAKE_INSTALL_PREFIX}\" STREQUAL \"/usr\" OR \"\${CMAKE_INSTALL_PREFIX}\" STREQUAL \"/usr/local\")
    set(COMEM_UNIT_DOCS \"man:comemd(8) man:comem(1)\")
  else()
    set(COMEM_UNIT_DOCS \"file://\${_mandir}/man8/comemd.8 file://\${_mandir}/man1/comem.1\")
  endif()
  configure_file(\"${CMAKE_SOURCE_DIR}/docs/comemd.service.in\" \"${CMAKE_BINARY_DIR}/comemd.service\" @ONLY)
")
install(FILES ${CMAKE_BINARY_DIR}/comemd.service DESTINATION ${COMEM_SYSTEMD_USER_DIR})

install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
file(GLOB _comem_docs ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${_comem_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY scenarios/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/scenarios FILES_MATCHING PATTERN "*.scn")
install(CODE "message(STATUS \"comem: the Python package is in \${CMAKE_INSTALL_PREFIX}/${COMEM_PY_DEST}; \"
                      \"put that on PYTHONPATH unless Python already looks there (docs/install.md)\")")
