// rbio discover -p HOST[:PORT]: SendTargets discovery; what it finds is
// stored as open-iscsi node records (iscsiadm) unless --no-store.
#include <iostream>

#include "commands.hpp"
#include "open_iscsi.hpp"
#include "options.hpp"
#include "rbio/initiator/session.hpp"

namespace rbio::cli {

namespace {

// Adds a node record per (target, portal) through iscsiadm; without
// iscsiadm, says so in one line on stderr and stores nothing.
void store_nodes(const std::vector<initiator::DiscoveredTarget>& targets, const initiator::Portal& portal) {
    std::vector<NodeRecord> existing;
    try {
        existing = read_node_records();
    } catch (const std::exception& e) {
        std::cerr << "rbio: warning: " << e.what() << "\n";
    }
    int added = 0, kept = 0;
    for (const auto& t : targets) {
        std::vector<std::string> addresses = t.addresses;
        if (addresses.empty()) addresses.push_back(portal.to_string() + ",1");
        for (const auto& a : addresses) {
            NodeStoreResult r = store_node_record(t.name, a, existing);
            if (r == NodeStoreResult::NoIscsiadm) {
                std::cerr << "rbio: iscsiadm not found (package open-iscsi): node records not stored\n";
                return;
            }
            (r == NodeStoreResult::Added ? added : kept)++;
        }
    }
    std::cerr << "rbio: open-iscsi node records: " << added << " added, " << kept
              << " already there (iscsiadm -m node lists them)\n";
}

}  // namespace

int discover_main(int argc, char** argv) {
    Args args(argc, argv, 1, {"--no-store"});
    args.allow_only({"--portal", "--no-store"});
    if (!args.has("--portal")) throw UsageError("discover needs -p HOST[:PORT]");
    initiator::Portal portal = portal_option(args, "discover");
    initiator::SessionOptions opts = session_options(args);
    opts.discovery = true;
    auto session = initiator::Session::login(portal, opts);
    std::vector<initiator::DiscoveredTarget> targets = session->send_targets();
    session->logout();
    for (const auto& t : targets) {
        if (t.addresses.empty()) std::cout << portal.to_string() << ",1 " << t.name << "\n";
        for (const auto& a : t.addresses) std::cout << a << " " << t.name << "\n";
    }
    std::cout.flush();
    if (targets.empty()) std::cerr << "rbio: " << portal.to_string() << " reports no targets\n";
    else if (!args.has("--no-store")) store_nodes(targets, portal);
    return kExitOk;
}

}  // namespace rbio::cli
