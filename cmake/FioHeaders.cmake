# Finds the C headers of exactly the installed fio version, for the fio
# external engine (initiator/fio/). They come from Debian's source package,
# fetched and configured by scripts/fio-headers.sh into .cache/ (never
# committed). Sets RBIO_FIO_INCLUDE_DIR and RBIO_FIO_VERSION.
execute_process(COMMAND dpkg-query -W "-f=\${Version}" fio
                OUTPUT_VARIABLE RBIO_FIO_VERSION RESULT_VARIABLE _rc
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT _rc EQUAL 0 OR RBIO_FIO_VERSION STREQUAL "")
  message(FATAL_ERROR "fio is not installed: run scripts/setup.sh (as root) first "
                      "(the fio engine, initiator/fio/, is built against exactly the installed fio)")
endif()
string(REPLACE ":" "_" _fio_dir_version "${RBIO_FIO_VERSION}")
set(_fio_dir "${PROJECT_SOURCE_DIR}/.cache/fio-src/${_fio_dir_version}")
if(NOT EXISTS "${_fio_dir}/.complete")
  message(STATUS "fio ${RBIO_FIO_VERSION} headers missing; fetching them with scripts/fio-headers.sh")
  execute_process(COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/fio-headers.sh"
                  RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_fio_dir}/.complete")
    message(FATAL_ERROR "could not fetch the fio ${RBIO_FIO_VERSION} headers: run scripts/setup.sh "
                        "(as root; it enables the deb-src entries scripts/fio-headers.sh needs)")
  endif()
endif()
set(RBIO_FIO_INCLUDE_DIR "${_fio_dir}")
message(STATUS "fio ${RBIO_FIO_VERSION} headers: ${RBIO_FIO_INCLUDE_DIR}")
