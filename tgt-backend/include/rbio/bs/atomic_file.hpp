#pragma once
// Files that readers poll (the statistics file, the metrics file) are
// replaced whole, so a reader sees the old file or the new one, never a
// part of either.
#include <string>
#include <string_view>

#include "rbio/common/unique_fd.hpp"

namespace rbio::bs {

// Writes `content` to PATH.tmp in the same folder (a rename is atomic only
// within one file system), mode 0644 whatever the umask (node_exporter
// reads the metrics as another user), then renames it over `path`. A
// missing folder is created, one level, mode 0755 whatever the umask
// (/run/rbio after a reboot). Throws Error naming the file and the reason; the temporary file
// is gone then.
void write_file_atomically(const std::string& path, std::string_view content);

// The same with the temporary file's name given (PATH.tmp, the caller's
// to build): a writer that runs every second keeps both names and so
// allocates nothing here.
void write_file_atomically(const std::string& path, const std::string& tmp, std::string_view content);

// Takes PATH.lock (created beside `path`, the folder too, as above) for as
// long as the returned descriptor is open: one writer per file. No
// descriptor when another process holds it; throws Error when it cannot be
// made.
UniqueFd claim_file(const std::string& path);

}  // namespace rbio::bs
