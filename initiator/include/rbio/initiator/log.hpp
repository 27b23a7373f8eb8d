#pragma once
// Logging of the initiator library and the CLI, through Boost.Log. Only
// log.cpp includes Boost.Log (it is heavy to compile); everything else uses
// RBIO_LOG, which formats nothing when the level is filtered out.
#include <sstream>
#include <string>
#include <string_view>

namespace rbio::initiator {

enum class LogLevel : int { Trace, Debug, Info, Warning, Error };

// "trace", "debug", "info", "warning", "error"; nothing for another word.
bool parse_log_level(std::string_view text, LogLevel& out);
// Messages below `level` are dropped. Default: Warning. Logs go to stderr.
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

}  // namespace rbio::initiator

#define RBIO_LOG(level, expr)                                                                    \
    do {                                                                                         \
        if (::rbio::initiator::log_enabled(::rbio::initiator::LogLevel::level)) {                \
            std::ostringstream rbio_log_os_;                                                     \
            /* expr is a << chain: parentheses would end it */                                   \
            rbio_log_os_ << expr; /* NOLINT(bugprone-macro-parentheses) */                       \
            ::rbio::initiator::log_line(::rbio::initiator::LogLevel::level, rbio_log_os_.str()); \
        }                                                                                        \
    } while (0)
