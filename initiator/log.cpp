#include "rbio/initiator/log.hpp"

#include <atomic>
#include <boost/log/core.hpp>
#include <boost/log/expressions.hpp>
#include <boost/log/trivial.hpp>
#include <boost/log/utility/setup/common_attributes.hpp>
#include <boost/log/utility/setup/console.hpp>
#include <iostream>

namespace rbio::initiator {
namespace {

namespace logging = boost::log;
using boost::log::trivial::severity_level;

std::atomic<int> g_level{int(LogLevel::Warning)};

severity_level to_boost(LogLevel l) {
    switch (l) {
        case LogLevel::Trace: return severity_level::trace;
        case LogLevel::Debug: return severity_level::debug;
        case LogLevel::Info: return severity_level::info;
        case LogLevel::Warning: return severity_level::warning;
        case LogLevel::Error: return severity_level::error;
    }
    return severity_level::error;
}

void setup_sink_once() {
    static bool done = [] {
        namespace expr = logging::expressions;
        logging::add_console_log(
            std::clog, logging::keywords::format = (expr::stream << "rbio: " << logging::trivial::severity
                                                                 << ": " << expr::smessage));
        return true;
    }();
    (void)done;
}

}  // namespace

bool parse_log_level(std::string_view text, LogLevel& out) {
    static constexpr std::pair<std::string_view, LogLevel> kNames[] = {{"trace", LogLevel::Trace},
                                                                       {"debug", LogLevel::Debug},
                                                                       {"info", LogLevel::Info},
                                                                       {"warning", LogLevel::Warning},
                                                                       {"error", LogLevel::Error}};
    for (auto [name, level] : kNames)
        if (text == name) {
            out = level;
            return true;
        }
    return false;
}

void set_log_level(LogLevel level) {
    setup_sink_once();
    g_level.store(int(level), std::memory_order_relaxed);
    logging::core::get()->set_filter(logging::trivial::severity >= to_boost(level));
}

bool log_enabled(LogLevel level) { return int(level) >= g_level.load(std::memory_order_relaxed); }

void log_line(LogLevel level, const std::string& message) {
    setup_sink_once();
    BOOST_LOG_STREAM_WITH_PARAMS(logging::trivial::logger::get(),
                                 (logging::keywords::severity = to_boost(level)))
        << message;
}

}  // namespace rbio::initiator
