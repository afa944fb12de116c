# The Python client (python/simba: pure Python on psycopg 3), installed by
# `make install` where the system's python3 finds it: under the prefix /usr
# in lib/python3/dist-packages (Debian's, the python3-simba package), under
# any other prefix in lib/python3.X/dist-packages (/usr/local's is on
# Debian's path; elsewhere set PYTHONPATH). SIMBA_PYTHON_DIR, relative to the
# prefix, overrides that; OFF installs no Python package.
include_guard(GLOBAL)

set(SIMBA_PYTHON_DIR "" CACHE STRING
  "Where make install puts the Python package simba, relative to the prefix (empty: as the system's python3 reads it; OFF: not installed)")
# The system's interpreter, not a virtualenv's or pyenv's first on PATH.
find_program(SIMBA_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
find_program(SIMBA_PYTHON3 python3)
set(simba_python_minor 3)
if(SIMBA_PYTHON3)
  execute_process(COMMAND ${SIMBA_PYTHON3} -c "import sys; print('%d.%d' % sys.version_info[:2])"
    OUTPUT_VARIABLE simba_python_minor OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE simba_python_rc)
  if(NOT simba_python_rc EQUAL 0)
    set(simba_python_minor 3)
  endif()
endif()

if(NOT SIMBA_PYTHON_DIR STREQUAL "OFF")
  # The prefix is known only when installing (cmake --install --prefix).
  install(CODE "
    set(simba_python_dir \"${SIMBA_PYTHON_DIR}\")
    if(NOT simba_python_dir AND CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      set(simba_python_dir lib/python3/dist-packages)
    elseif(NOT simba_python_dir)
      set(simba_python_dir lib/python${simba_python_minor}/dist-packages)
    endif()
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/\${simba_python_dir}\" TYPE DIRECTORY
      FILES \"${PROJECT_SOURCE_DIR}/python/simba\" PATTERN __pycache__ EXCLUDE)
  " COMPONENT python)
endif()
