#pragma once
// open-iscsi compatibility: the initiator name file, and node records
// (open-iscsi's database of targets under /etc/iscsi/nodes), written with
// open-iscsi's own `iscsiadm` and read with its library, libopeniscsiusr.
// Neither needs iscsid nor the kernel's iSCSI modules for this.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rbio/initiator/chap.hpp"

namespace rbio::cli {

inline constexpr const char* kInitiatorNameFile = "/etc/iscsi/initiatorname.iscsi";

// The InitiatorName= of `path`, or "" when the file or the key is missing.
std::string initiator_name_from_file(const std::string& path = kInitiatorNameFile);

struct NodeRecord {
    std::string target;
    std::string address;  // without brackets for IPv6
    uint32_t port = 0;
    int32_t tpgt = -1;
    // node.session.auth.*: set when authmethod is CHAP with a username and
    // password (`chap`), and for mutual CHAP username_in/password_in too.
    std::optional<initiator::ChapCredentials> chap;
    std::optional<initiator::ChapCredentials> chap_in;
};

// Fills `record`'s CHAP credentials from a record's configuration text
// ("key = value" lines, as iscsi_node_dump_config and iscsiadm print it).
void parse_node_auth(const std::string& config, NodeRecord& record);

// Every node record (libopeniscsiusr's iscsi_nodes_get). Throws
// std::runtime_error with libopeniscsiusr's reason.
std::vector<NodeRecord> read_node_records();

enum class NodeStoreResult { Added, Kept, NoIscsiadm };

// Stores a SendTargets answer ("ADDRESS:PORT,TPGT" as the target sent it)
// for `target` with `iscsiadm -m node -o new`. A record that exists is
// kept as it is: `-o new` would reset its settings (e.g. CHAP) to the
// defaults, and the discovery_* keys cannot be updated (iscsiadm looks
// records up by them). Throws std::runtime_error with iscsiadm's output.
NodeStoreResult store_node_record(const std::string& target, const std::string& address_tpgt,
                                  const std::vector<NodeRecord>& existing);

}  // namespace rbio::cli
