# Debian packages, made with `cpack` in the build folder (the build knows the
# exact tgt and fio versions it fetched headers for; cmake/TgtHeaders.cmake,
# cmake/FioHeaders.cmake):
#
#   rbio-tgt  bs_rbio.so for tgtd, Depends tgt (= the tgt it was built for)
#             and the libraries dpkg-shlibdeps finds it linked with;
#             /etc/rbio/tgtd.conf (a conffile; as shipped, all defaults);
#             says when a running tgtd needs a restart, and warns on
#             removal when /etc/tgt still uses bs-type rbio
#   rbio      the rbio command (its --help is the manual), the
#             rbio-session@.service unit; Depends fuse3 (fusermount3, the
#             FUSE mount helper of `rbio login --mount`) and its libraries
#   rbio-fio  fio's ioengine=external:/usr/lib/rbio/fio/librbio_fio.so,
#             Depends fio (= the fio it was built for): apart, so that the
#             initiator does not pin fio's version nor pull in fio and its
#             Ceph and GlusterFS libraries
#
# scripts/package.sh builds them from a clean build folder (-DRBIO_WERROR=OFF);
# tests/package/ installs them into a clean Debian root.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "rbio")
set(CPACK_PACKAGE_VENDOR "rbio developers")
set(CPACK_PACKAGE_CONTACT "rbio developers")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
# Each package's description starts with its own synopsis line; an empty
# summary keeps CPack from putting the project's in front of it.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL tgt rbio fio)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# Depends: what the binaries are linked with, from dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

set(CPACK_DEBIAN_TGT_PACKAGE_NAME "rbio-tgt")
# tgt's internal structures may differ between builds: the module works in
# exactly the tgtd it was built against (it also checks tgtd's build-id).
set(CPACK_DEBIAN_TGT_PACKAGE_DEPENDS "tgt (= ${RBIO_TGT_VERSION})")
string(CONCAT CPACK_DEBIAN_TGT_DESCRIPTION
    "rbio backing store and transports for tgtd\n"
    "bs_rbio.so, loaded by the stock tgtd: an io_uring backing store (--bstype rbio)\n"
    "and faster iSCSI TCP and iSER transports taken over inside tgtd.")
# postinst: a running tgtd keeps the module it loaded until restarted;
# prerm: targets of /etc/tgt with bs-type rbio fail tgt's next start.
set(CPACK_DEBIAN_TGT_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/rbio-tgt/conffiles;${PROJECT_SOURCE_DIR}/packaging/rbio-tgt/postinst;${PROJECT_SOURCE_DIR}/packaging/rbio-tgt/prerm")

set(CPACK_DEBIAN_RBIO_PACKAGE_NAME "rbio")
set(CPACK_DEBIAN_RBIO_PACKAGE_DEPENDS "fuse3")
# `rbio discover` stores node records with iscsiadm when it is there.
set(CPACK_DEBIAN_RBIO_PACKAGE_RECOMMENDS "open-iscsi")
set(CPACK_DEBIAN_RBIO_PACKAGE_SUGGESTS "rbio-fio")
string(CONCAT CPACK_DEBIAN_RBIO_DESCRIPTION
    "rbio userspace iSCSI initiator\n"
    "The rbio command: discovery, login with LUs as files (FUSE), sessions held\n"
    "by a background process (rbio-session@.service), benchmarks and SCSI probes.")
set(CPACK_DEBIAN_RBIO_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/rbio/postinst;${PROJECT_SOURCE_DIR}/packaging/rbio/postrm")

set(CPACK_DEBIAN_FIO_PACKAGE_NAME "rbio-fio")
# fio checks the engine's ABI version when it loads it, but the engine is
# compiled with the headers (structure layouts) of exactly this fio.
set(CPACK_DEBIAN_FIO_PACKAGE_DEPENDS "fio (= ${RBIO_FIO_VERSION})")
string(CONCAT CPACK_DEBIAN_FIO_DESCRIPTION
    "fio engine on the rbio initiator\n"
    "For fio's ioengine=external:/usr/lib/rbio/fio/librbio_fio.so (portal, target, lun).")

# Files that are no build product.
set(_pkg "${PROJECT_SOURCE_DIR}/packaging")
# Only in the package, where dpkg keeps an admin's edits (a conffile): a
# plain `cmake --install` would overwrite them.
install(FILES "${_pkg}/rbio-tgt/tgtd.conf" DESTINATION /etc/rbio COMPONENT tgt EXCLUDE_FROM_ALL)
# The pages the installed ones and the alerting rules link to, too.
install(FILES "${_pkg}/copyright" "${PROJECT_SOURCE_DIR}/docs/tcp-transport.md"
              "${PROJECT_SOURCE_DIR}/docs/iser-transport.md" "${PROJECT_SOURCE_DIR}/docs/several-gateways.md"
              "${PROJECT_SOURCE_DIR}/docs/metrics.md" "${PROJECT_SOURCE_DIR}/docs/ceph-rbd.md"
        DESTINATION share/doc/rbio-tgt COMPONENT tgt)
install(FILES "${_pkg}/rbio-tgt/rbio-alerts.yml" DESTINATION share/doc/rbio-tgt/examples COMPONENT tgt)
# Package only too: the unit runs /usr/bin/rbio, not a plain install's
# /usr/local/bin/rbio.
install(FILES "${_pkg}/rbio/rbio-session@.service" DESTINATION /lib/systemd/system COMPONENT rbio
        EXCLUDE_FROM_ALL)
install(DIRECTORY DESTINATION /etc/rbio/sessions COMPONENT rbio EXCLUDE_FROM_ALL)
install(FILES "${_pkg}/copyright" "${PROJECT_SOURCE_DIR}/docs/initiator.md"
              "${PROJECT_SOURCE_DIR}/docs/several-gateways.md"
        DESTINATION share/doc/rbio COMPONENT rbio)
install(FILES "${_pkg}/rbio/session.conf" DESTINATION share/doc/rbio/examples COMPONENT rbio)
install(FILES "${_pkg}/copyright" DESTINATION share/doc/rbio-fio COMPONENT fio)

include(CPack)
