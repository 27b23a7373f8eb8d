# Finds the C headers of exactly the installed tgt version. They come from
# Debian's source package, fetched by scripts/setup.sh into .cache/ (never
# committed). Sets RBIO_TGT_INCLUDE_DIR and RBIO_TGT_VERSION.
execute_process(COMMAND dpkg-query -W "-f=\${Version}" tgt
                OUTPUT_VARIABLE RBIO_TGT_VERSION RESULT_VARIABLE _rc
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT _rc EQUAL 0 OR RBIO_TGT_VERSION STREQUAL "")
  message(FATAL_ERROR "tgt is not installed: run scripts/setup.sh (as root) first")
endif()
string(REPLACE ":" "_" _tgt_dir_version "${RBIO_TGT_VERSION}")
set(_tgt_dir "${PROJECT_SOURCE_DIR}/.cache/tgt-src/${_tgt_dir_version}")
if(NOT EXISTS "${_tgt_dir}/.complete")
  message(STATUS "tgt ${RBIO_TGT_VERSION} headers missing; fetching them with scripts/setup.sh --no-apt")
  execute_process(COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/setup.sh" --no-apt
                  RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_tgt_dir}/.complete")
    message(FATAL_ERROR "could not fetch the tgt ${RBIO_TGT_VERSION} headers: run scripts/setup.sh (as root)")
  endif()
endif()
set(RBIO_TGT_INCLUDE_DIR "${_tgt_dir}")
message(STATUS "tgt ${RBIO_TGT_VERSION} headers: ${RBIO_TGT_INCLUDE_DIR}")
