# Cross-building comem for 64-bit Windows with Debian's MinGW-w64 (the POSIX thread model, for
# winpthreads): cmake -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake (scripts/windows-check.sh does).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc-posix)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Tests run under wine: ctest starts each .exe through it.
set(CMAKE_CROSSCOMPILING_EMULATOR wine)
