# Run at install time (install(SCRIPT) in client/CMakeLists.txt), after the
# shared library is installed: refreshes the dynamic linker's cache with
# ldconfig, so that programs linked against libsimba-client (pkg-config,
# find_package) load libsimba-client.so.N without LD_LIBRARY_PATH. Only for a
# system prefix (/usr, /usr/local: directories in /etc/ld.so.conf) and an
# install in place (no DESTDIR: a package build or a staging install runs
# nothing on the build host). Never fails the install: without ldconfig, or
# when it fails (not root), it says what to run.
if(SIMBA_LDCONFIG_DONE)  # once per install (the cli component has it too)
  return()
endif()
set(SIMBA_LDCONFIG_DONE TRUE)
string(REGEX REPLACE "/+$" "" _simba_prefix "${CMAKE_INSTALL_PREFIX}")
if(NOT "$ENV{DESTDIR}" STREQUAL "" OR NOT _simba_prefix MATCHES "^/usr(/local)?$")
  return()
endif()
# PATH first, then the sbin directories a non-root PATH may lack.
set(SIMBA_LDCONFIG "")
string(REPLACE ":" ";" _simba_path "$ENV{PATH}")
foreach(_simba_dir IN LISTS _simba_path ITEMS /sbin /usr/sbin)
  if(_simba_dir AND EXISTS "${_simba_dir}/ldconfig" AND NOT IS_DIRECTORY "${_simba_dir}/ldconfig")
    set(SIMBA_LDCONFIG "${_simba_dir}/ldconfig")
    break()
  endif()
endforeach()
if(NOT SIMBA_LDCONFIG)
  message(NOTICE "simba: ldconfig not found: run it as root so that programs find libsimba-client")
  return()
endif()
message(STATUS "Running ${SIMBA_LDCONFIG}")
execute_process(COMMAND "${SIMBA_LDCONFIG}" RESULT_VARIABLE _simba_rc)
if(NOT _simba_rc EQUAL 0)
  message(NOTICE "simba: ${SIMBA_LDCONFIG} failed (${_simba_rc}): run it as root so that programs find libsimba-client")
endif()
