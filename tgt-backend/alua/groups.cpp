// The groups file: "ID STATE" per line, shared by every gateway of an LU set.
#include <algorithm>
#include <charconv>

#include "rbio/bs/alua.hpp"
#include "rbio/bs/config_file.hpp"

namespace rbio::bs::alua {

namespace {

struct Name {
    std::string_view text;
    State state;
};
constexpr Name names[] = {
    {"active/optimized", State::active_optimized},
    {"active/non-optimized", State::active_non_optimized},
    {"standby", State::standby},
    {"unavailable", State::unavailable},
    {"transitioning", State::transitioning},
};

std::string known_states() {
    std::string all;
    for (const auto& n : names) all += std::string(all.empty() ? "" : ", ") + std::string(n.text);
    return all;
}

}  // namespace

std::optional<State> parse_state(std::string_view name) {
    for (const auto& n : names)
        if (n.text == name) return n.state;
    return std::nullopt;
}

std::string_view state_name(State s) {
    for (const auto& n : names)
        if (n.state == s) return n.text;
    return "unknown";
}

GroupTable parse_groups(std::string_view text, const std::string& where) {
    GroupTable t;
    int no = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == text.npos ? std::string_view{} : text.substr(nl + 1);
        ++no;
        if (auto hash = line.find('#'); hash != line.npos) line = line.substr(0, hash);
        line = trim(line);
        if (line.empty()) continue;
        const std::string at = where + ":" + std::to_string(no);

        auto gap = line.find_first_of(" \t");
        if (gap == line.npos)
            throw ConfigError(at + ": expected 'ID STATE', got '" + std::string(line) + "'");
        std::string_view id_text = line.substr(0, gap), state_text = trim(line.substr(gap));
        unsigned id = 0;
        auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
        if (ec != std::errc{} || end != id_text.data() + id_text.size() || id < 1 || id > 65535)
            throw ConfigError(at + ": port group '" + std::string(id_text) +
                              "' is not a number from 1 to 65535");
        auto state = parse_state(state_text);
        if (!state)
            throw ConfigError(at + ": unknown state '" + std::string(state_text) +
                              "' (known: " + known_states() + ")");
        if (std::any_of(t.begin(), t.end(), [&](const Group& g) { return g.id == id; }))
            throw ConfigError(at + ": port group " + std::to_string(id) + " is listed twice");
        if (t.size() == max_groups)
            throw ConfigError(at + ": more than " + std::to_string(max_groups) + " port groups");
        t.push_back({uint16_t(id), *state});
    }
    std::sort(t.begin(), t.end(), [](const Group& a, const Group& b) { return a.id < b.id; });
    return t;
}

std::optional<State> state_of(const GroupTable& t, uint16_t id) {
    for (const auto& g : t)
        if (g.id == id) return g.state;
    return std::nullopt;
}

}  // namespace rbio::bs::alua
