#include "open_iscsi.hpp"

#include <fcntl.h>
#include <libopeniscsiusr.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "rbio/initiator/session.hpp"
#include "socket.hpp"  // UniqueFd

extern char** environ;

namespace rbio::cli {

std::string initiator_name_from_file(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        size_t start = line.find_first_not_of(" \t");
        if (start == std::string::npos || line[start] == '#') continue;
        const std::string key = "InitiatorName=";
        if (line.compare(start, key.size(), key) != 0) continue;
        std::string v = line.substr(start + key.size());
        v.erase(v.find_last_not_of(" \t\r") + 1);
        return v;
    }
    return "";
}

void parse_node_auth(const std::string& config, NodeRecord& record) {
    std::map<std::string, std::string> auth;
    std::istringstream in(config);
    std::string line;
    const std::string prefix = "node.session.auth.";
    while (std::getline(in, line)) {
        if (line.compare(0, prefix.size(), prefix) != 0) continue;
        size_t eq = line.find(" = ");
        if (eq == std::string::npos) continue;
        std::string v = line.substr(eq + 3);
        v.erase(v.find_last_not_of(" \t\r") + 1);
        // iscsiadm shows unset values as "<empty>".
        if (v != "<empty>") auth[line.substr(prefix.size(), eq - prefix.size())] = v;
    }
    if (auth["authmethod"] != "CHAP" || auth["username"].empty() || auth["password"].empty()) return;
    record.chap = initiator::ChapCredentials{auth["username"], auth["password"]};
    if (!auth["username_in"].empty() && !auth["password_in"].empty())
        record.chap_in = initiator::ChapCredentials{auth["username_in"], auth["password_in"]};
}

std::vector<NodeRecord> read_node_records() {
    struct ContextFree {
        void operator()(iscsi_context* c) const { iscsi_context_free(c); }
    };
    std::unique_ptr<iscsi_context, ContextFree> ctx(iscsi_context_new());
    if (!ctx) throw std::runtime_error("libopeniscsiusr: cannot create a context");
    iscsi_context_log_priority_set(ctx.get(), LIBISCSI_LOG_PRIORITY_ERROR);
    iscsi_node** nodes = nullptr;
    uint32_t count = 0;
    int rc = iscsi_nodes_get(ctx.get(), &nodes, &count);
    if (rc != LIBISCSI_OK)
        throw std::runtime_error(std::string("reading open-iscsi node records: ") + iscsi_strerror(rc));
    std::vector<NodeRecord> out;
    for (uint32_t i = 0; i < count; ++i) {
        NodeRecord r;
        r.target = iscsi_node_target_name_get(nodes[i]);
        r.address = iscsi_node_conn_address_get(nodes[i]);
        r.port = iscsi_node_conn_port_get(nodes[i]);
        r.tpgt = iscsi_node_tpgt_get(nodes[i]);
        // The dump is the only way libopeniscsiusr shows the auth keys.
        std::unique_ptr<char, decltype(&std::free)> config(
            const_cast<char*>(iscsi_node_dump_config(nodes[i], true)), std::free);
        if (config) parse_node_auth(config.get(), r);
        out.push_back(std::move(r));
    }
    iscsi_nodes_free(nodes, count);
    return out;
}

namespace {

// Runs argv (searched in PATH plus /usr/sbin, /sbin) and returns its exit
// status with stdout and stderr in `output`; -1 when it cannot be started.
int run_captured(std::vector<std::string> argv, std::string& output) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    initiator::UniqueFd rd(p[0]), wr(p[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
    posix_spawn_file_actions_adddup2(&fa, wr.get(), 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char*> ptrs;
    ptrs.reserve(argv.size() + 1);
    for (auto& a : argv) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    pid_t pid = -1;
    int rc = ENOENT;
    for (const char* dir : {"", "/usr/sbin/", "/sbin/"}) {
        std::string path = std::string(dir) + argv[0];
        rc = *dir ? posix_spawn(&pid, path.c_str(), &fa, nullptr, ptrs.data(), environ)
                  : posix_spawnp(&pid, path.c_str(), &fa, nullptr, ptrs.data(), environ);
        if (rc != ENOENT) break;
    }
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    wr = initiator::UniqueFd();
    char buf[4096];
    ssize_t n;
    while ((n = ::read(rd.get(), buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) output.append(buf, size_t(n));
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

NodeStoreResult store_node_record(const std::string& target, const std::string& address_tpgt,
                                  const std::vector<NodeRecord>& existing) {
    std::string address = address_tpgt.substr(0, address_tpgt.rfind(','));
    initiator::Portal portal = initiator::Portal::parse(address);
    for (const NodeRecord& r : existing)
        if (r.target == target && r.address == portal.host && r.port == portal.port)
            return NodeStoreResult::Kept;
    std::string output;
    int rc = run_captured({"iscsiadm", "-m", "node", "-o", "new", "-T", target, "-p", address_tpgt}, output);
    if (rc < 0) return NodeStoreResult::NoIscsiadm;
    if (rc != 0) {
        while (!output.empty() && output.back() == '\n') output.pop_back();
        for (auto& c : output)
            if (c == '\n') c = ' ';
        throw std::runtime_error("iscsiadm -m node -o new -T " + target + " -p " + address_tpgt +
                                 " failed (exit " + std::to_string(rc) + "): " + output);
    }
    return NodeStoreResult::Added;
}

}  // namespace rbio::cli
