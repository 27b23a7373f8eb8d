// rbio discover -p HOST[:PORT]: SendTargets discovery.
#include <iostream>

#include "commands.hpp"
#include "options.hpp"
#include "rbio/initiator/session.hpp"

namespace rbio::cli {

int discover_main(int argc, char** argv) {
    Args args(argc, argv, 1, {});
    args.allow_only({"--portal"});
    if (!args.has("--portal")) throw UsageError("discover needs -p HOST[:PORT]");
    initiator::Portal portal = portal_option(args);
    initiator::SessionOptions opts = session_options(args);
    opts.discovery = true;
    auto session = initiator::Session::login(portal, opts);
    std::vector<initiator::DiscoveredTarget> targets = session->send_targets();
    session->logout();
    for (const auto& t : targets) {
        if (t.addresses.empty()) std::cout << portal.to_string() << ",1 " << t.name << "\n";
        for (const auto& a : t.addresses) std::cout << a << " " << t.name << "\n";
    }
    if (targets.empty()) std::cerr << "rbio: " << portal.to_string() << " reports no targets\n";
    return kExitOk;
}

}  // namespace rbio::cli
