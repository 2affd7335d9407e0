# The script tests' one registration (the referees, browser, ops, deploy and netns folders): included by
# tests/CMakeLists.txt after BATON_PYTHON is set.

# baton_python_test(LABEL NAME SCRIPT [TIMEOUT S] [SKIP_RETURN_CODE C] [RUNNER PY] [FIXTURE F] [ENVIRONMENT E...]): the
# ctest test LABEL.NAME running SCRIPT (in the calling folder) with the project venv's Python, through the calling
# folder's RUNNER script when given; labelled LABEL, BATON_BIN_DIR and ENVIRONMENT set, TIMEOUT 300 unless given.
function(baton_python_test label name script)
  cmake_parse_arguments(arg "" "TIMEOUT;SKIP_RETURN_CODE;RUNNER;FIXTURE" "ENVIRONMENT" ${ARGN})
  set(command ${BATON_PYTHON})
  if(arg_RUNNER)
    list(APPEND command ${CMAKE_CURRENT_SOURCE_DIR}/${arg_RUNNER})
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  set(test ${label}.${name})
  add_test(NAME ${test} COMMAND ${command} ${CMAKE_CURRENT_SOURCE_DIR}/${script})
  set(environment "BATON_BIN_DIR=${CMAKE_BINARY_DIR}/bin" ${arg_ENVIRONMENT})
  set_tests_properties(${test} PROPERTIES LABELS ${label} TIMEOUT ${arg_TIMEOUT} ENVIRONMENT "${environment}")
  if(arg_SKIP_RETURN_CODE)
    set_tests_properties(${test} PROPERTIES SKIP_RETURN_CODE ${arg_SKIP_RETURN_CODE})
  endif()
  if(arg_FIXTURE)
    set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED ${arg_FIXTURE})
  endif()
endfunction()

# baton_python_tests(LABEL [options of baton_python_test]): one test per test_*.py of the calling folder, named by
# the file without "test_" (test_vae.py: LABEL.vae).
function(baton_python_tests label)
  file(GLOB scripts CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_*.py)
  foreach(script ${scripts})
    get_filename_component(stem ${script} NAME_WE)
    string(REGEX REPLACE "^test_" "" name ${stem})
    baton_python_test(${label} ${name} ${stem}.py ${ARGN})
  endforeach()
endfunction()
