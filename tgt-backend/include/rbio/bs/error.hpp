#pragma once
// Errors that carry what was being done and why, e.g.
// "open /srv/lun1.img: No such file or directory".
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rbio::bs {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// `what` plus strerror(err); err is a positive errno value.
inline Error sys_error(const std::string& what, int err) { return Error(what + ": " + std::strerror(err)); }

}  // namespace rbio::bs
