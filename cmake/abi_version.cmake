# SPDX-License-Identifier: GPL-2.0-only
# The version names the state ABI it writes. Included by CMakeLists.txt, or
# run alone (the packaging.version_abi test):
#   cmake -DABI_HEADER=include/sluice_abi.h -DVERSION=0.3.0 -DVERSION_ABI=1 -P cmake/abi_version.cmake
# Fails unless the header's SLUICE_ABI_VERSION is VERSION_ABI, the ABI the
# version is declared for: a new ABI is a new version.
function(sluice_check_abi header version version_abi)
  file(STRINGS "${header}" line REGEX "^#define SLUICE_ABI_VERSION[ \t]+[0-9]+")
  string(REGEX REPLACE "^#define SLUICE_ABI_VERSION[ \t]+([0-9]+).*" "\\1" abi "${line}")
  if(NOT abi MATCHES "^[0-9]+$")
    message(FATAL_ERROR "${header} defines no SLUICE_ABI_VERSION")
  endif()
  if(NOT abi EQUAL version_abi)
    message(FATAL_ERROR "${header} declares state ABI ${abi}, but version ${version} is declared for "
                        "ABI ${version_abi}: a new ABI takes a new version; raise project(VERSION) and "
                        "SLUICE_VERSION_ABI together in CMakeLists.txt")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  sluice_check_abi("${ABI_HEADER}" "${VERSION}" "${VERSION_ABI}")
  message(STATUS "version ${VERSION} is declared for ABI ${VERSION_ABI}, as ${ABI_HEADER} says")
endif()
