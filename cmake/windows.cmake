# cmake/windows.cmake - comem on Windows so far (issue 26; docs/windows.md says what is and is not).
#
# What builds for Windows: one object set (the rules, the protocol, the books, whom to ask, the
# coordinator, the client library, the simulated card and the device sources, and the platform
# layer's Windows backends: os/, base/, probe/, shm/ and client/ *_win.c), built static as
# comem_portable and as comem.dll; comemd.exe and comem.exe on it; and the tests, run under wine
# (the toolchain file sets wine as the emulator ctest starts each .exe through). docs/windows.md
# says what runs and what does not.

find_package(Threads REQUIRED)
# C99's printf (%zu, %lld) rather than msvcrt's, for comem's log lines and cmocka's messages alike.
add_compile_definitions(__USE_MINGW_ANSI_STDIO=1)

set(COMEM_PORTABLE_SOURCES
  src/base/clock.c src/base/log.c src/base/name.c src/base/size.c src/base/socket_name.c src/base/sort.c
  src/base/spin.c src/base/status.c src/base/token.c src/coord/plan.c
  src/probe/cuda_driver.c src/probe/cuda_luid.c src/probe/cuda_view.c src/probe/device.c src/probe/hostram.c src/probe/nvml.c
  src/probe/select.c src/probe/sim.c src/probe/sim_spec.c src/probe/simcard.c src/shm/view.c)
# The platform layer's Windows backends, as far as they are written (os/, base/, probe/ and shm/ *_win.c).
file(GLOB COMEM_OS_SOURCES CONFIGURE_DEPENDS src/os/*_win.c src/base/*_win.c src/probe/*_win.c src/shm/*_win.c)
# The coordinator (coord/), the client library (client/) and the pager (pager/: the CUDA driver's VMM,
# or the simulated card's pages on os/vm.h) build whole: they stand on the platform layer (the
# client's own port to it: client/port_win.c).
file(GLOB COMEM_PORTABLE_LAYERS CONFIGURE_DEPENDS src/arith/*.c src/wire/*.c src/ledger/*.c src/coord/*.c
     src/client/*.c src/pager/*.c)
list(FILTER COMEM_PORTABLE_LAYERS EXCLUDE REGEX "_posix\\.c$")
# One object set, built static (what the programs and tests link) and as comem.dll (what a binding
# loads: its exports are comem.h's COMEM_API functions).
add_library(comem_objects OBJECT ${COMEM_PORTABLE_SOURCES} ${COMEM_PORTABLE_LAYERS} ${COMEM_OS_SOURCES})
target_include_directories(comem_objects PUBLIC include src)
target_compile_definitions(comem_objects PRIVATE COMEM_BUILD_DLL)
add_library(comem_portable STATIC $<TARGET_OBJECTS:comem_objects>)
target_include_directories(comem_portable PUBLIC include src)
# json-c built for MinGW by scripts/windows-check.sh into COMEM_WIN_DEPS (Debian ships none), for the
# coordinator's status snapshot.
set(COMEM_WIN_DEPS "" CACHE PATH "Where cmocka and json-c for MinGW are installed")
find_path(COMEM_JSONC_INCLUDE json-c/json.h HINTS ${COMEM_WIN_DEPS}/include NO_CMAKE_FIND_ROOT_PATH REQUIRED)
find_library(COMEM_JSONC_LIB NAMES libjson-c.a json-c HINTS ${COMEM_WIN_DEPS}/lib NO_CMAKE_FIND_ROOT_PATH REQUIRED)
target_include_directories(comem_objects PUBLIC ${COMEM_JSONC_INCLUDE} ${COMEM_JSONC_INCLUDE}/json-c)
target_include_directories(comem_portable PUBLIC ${COMEM_JSONC_INCLUDE} ${COMEM_JSONC_INCLUDE}/json-c)
target_link_libraries(comem_portable PUBLIC Threads::Threads advapi32 dxgi dxguid ${COMEM_JSONC_LIB})
# Each exe carries what it needs: wine finds no MinGW runtime DLLs beside it.
target_link_options(comem_portable PUBLIC -static)

add_library(comem SHARED $<TARGET_OBJECTS:comem_objects>)
set_target_properties(comem PROPERTIES PREFIX "" OUTPUT_NAME comem RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
target_link_libraries(comem PRIVATE Threads::Threads advapi32 dxgi dxguid ${COMEM_JSONC_LIB})
target_link_options(comem PRIVATE -static)

# What comemd.exe and comem.exe share (tools/common/, as on Linux), the metrics file written as on Linux
# but for the atomic replacement (tools/common/prom_file_win.c).
add_library(comem_tools STATIC tools/common/args.c tools/common/jsonout.c tools/common/prom.c
            tools/common/prom_file_win.c tools/common/snapshot.c tools/common/text.c)
target_include_directories(comem_tools PUBLIC tools)
target_link_libraries(comem_tools PUBLIC comem_portable)

# comemd.exe: the coordinator as a program.
add_executable(comemd tools/comemd/main.c tools/comemd/metrics.c tools/comemd/options.c)
target_link_libraries(comemd PRIVATE comem_tools)
set_target_properties(comemd PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

# comem.exe: the CLI's status, devices, calc, release and metrics; run, demo, simulate and watch say
# why they are not here (tools/comem/cmds_win.c).
set(COMEM_CLI_WIN_SOURCES tools/comem/calc.c tools/comem/calc_explain.c tools/comem/devices.c tools/comem/main.c
    tools/comem/metrics.c tools/comem/output.c tools/comem/release.c tools/comem/status.c tools/comem/cmds_win.c)
add_executable(comem_cli ${COMEM_CLI_WIN_SOURCES})
set_target_properties(comem_cli PROPERTIES OUTPUT_NAME comem RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
target_link_libraries(comem_cli PRIVATE comem_tools)

# A wheel (scikit-build-core sets SKBUILD; scripts/wheel-windows.sh cross-builds one): the binding's
# package with comem.dll, comem.exe and comemd.exe in comem/_native/bin, where comem/_lib.py and
# comem/_bin.py look first on Windows; build-info.json says the version and json-c (no glibc there).
if(SKBUILD)
  install(TARGETS comem comem_cli comemd RUNTIME DESTINATION comem/_native/bin)
  install(CODE "file(WRITE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/comem/_native/build-info.json\"
                     \"{\\\"version\\\": \\\"${PROJECT_VERSION}\\\", \\\"system\\\": \\\"windows\\\", \\\"json_c\\\": \\\"static\\\"}\\n\")")
endif()

if(COMEM_BUILD_TESTS)
  # cmocka built for MinGW: scripts/windows-check.sh builds Debian's source into COMEM_WIN_DEPS
  # (outside the MinGW root the toolchain file confines searches to).
  find_path(COMEM_CMOCKA_INCLUDE cmocka.h HINTS ${COMEM_WIN_DEPS}/include NO_CMAKE_FIND_ROOT_PATH REQUIRED)
  find_library(COMEM_CMOCKA_LIB NAMES cmocka-static libcmocka-static.a HINTS ${COMEM_WIN_DEPS}/lib
               NO_CMAKE_FIND_ROOT_PATH REQUIRED)
  enable_testing()
  # The scripted drivers (tests/fakes/), as DLLs beside the tests, which load them from there.
  foreach(fake fake_nvml fake_nvml_legacy fake_cuda)
    string(REGEX REPLACE "_legacy$" "" src ${fake})
    add_library(${fake} SHARED tests/fakes/${src}.c)
    target_include_directories(${fake} PRIVATE src tests/fakes)
    set_target_properties(${fake} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
    target_link_options(${fake} PRIVATE -static)
  endforeach()
  target_compile_definitions(fake_nvml_legacy PRIVATE FAKE_NVML_LEGACY=1)
  foreach(name test_arith test_base test_calc test_comemd_serves test_coord_serves test_dll_win test_hostmem_win test_ledger test_lock test_loop test_nvml_fake test_os test_plan test_proc test_rundir_win test_shm test_stream test_sim_shared test_view test_wddm_win test_wire test_xlock)
    add_executable(${name} tests/unit/${name}.c)
    target_include_directories(${name} PRIVATE tests ${COMEM_CMOCKA_INCLUDE})
    target_link_libraries(${name} PRIVATE comem_portable ${COMEM_CMOCKA_LIB})
    # cmocka.h declares its message functions with `printf`, which MinGW's GCC checks as msvcrt's
    # (no %zu), while both sides run C99's (above; cmocka is built with it too): the formats are
    # checked in the Linux build, where the attribute means what it says.
    target_compile_options(${name} PRIVATE -Wno-format)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT 120 ENVIRONMENT "WINEDEBUG=-all")
  endforeach()
  add_dependencies(test_nvml_fake fake_nvml fake_nvml_legacy fake_cuda)
  add_dependencies(test_comemd_serves comemd) # it starts comemd.exe beside it
  add_dependencies(test_dll_win comem) # it loads comem.dll from beside it
  # comem.exe against comemd.exe, each started through wine by the script.
  add_test(NAME cli_win COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_cli_win.sh ${CMAKE_BINARY_DIR}/bin)
  set_tests_properties(cli_win PROPERTIES TIMEOUT 180 ENVIRONMENT "WINEDEBUG=-all")
  # Its one case skips where wine's DXGI has no display (no xvfb): say so, not "Passed".
  set_tests_properties(test_wddm_win PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")

  # The Python binding's suites under a Windows CPython, started through wine like the tests above:
  # scripts/windows-check.sh puts python.org's embeddable build in COMEM_WIN_DEPS/python. They load
  # comem.dll and start comemd.exe and comem.exe from this build; the paths they are given are
  # Windows' (wine's drive Z: is /).
  set(COMEM_WIN_PYTHON ${COMEM_WIN_DEPS}/python/python.exe)
  if(EXISTS ${COMEM_WIN_PYTHON})
    function(comem_wine_path out path)
      string(REPLACE "/" "\\" p "${path}")
      set(${out} "Z:${p}" PARENT_SCOPE)
    endfunction()
    comem_wine_path(w_lib ${CMAKE_BINARY_DIR}/bin/comem.dll)
    comem_wine_path(w_bin ${CMAKE_BINARY_DIR}/bin)
    comem_wine_path(w_src ${CMAKE_SOURCE_DIR})
    comem_wine_path(w_py ${CMAKE_SOURCE_DIR}/python)
    foreach(suite test_smoke test_binding test_calc_binding test_pager test_view_simcard test_autostart)
      add_test(NAME py_${suite} COMMAND ${CMAKE_CROSSCOMPILING_EMULATOR} ${COMEM_WIN_PYTHON} -m unittest -v ${suite}
               WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests/python)
      set_tests_properties(py_${suite} PROPERTIES TIMEOUT 300 LABELS python ENVIRONMENT
        "WINEDEBUG=-all;COMEM_LIB=${w_lib};COMEM_BIN_DIR=${w_bin};COMEM_SOURCE_DIR=${w_src};PYTHONPATH=${w_py};PYTHONDONTWRITEBYTECODE=1;COMEM_LOG=warn")
    endforeach()
    # The Windows wheel, built with the dev venv's scikit-build-core, installed by pip for win_amd64 and
    # used by this Python from its own folder (it skips, 77, without either).
    add_test(NAME wheel_win COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/test_wheel_win.sh
             ${CMAKE_SOURCE_DIR}/.venv/bin/python ${COMEM_WIN_PYTHON})
    set_tests_properties(wheel_win PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "WINEDEBUG=-all")
  else()
    message(STATUS "comem: no Windows Python at ${COMEM_WIN_PYTHON}: the binding's suites are not run under wine")
  endif()
endif()
