// Two "hosts" on one machine for the multi-host tests: two network namespaces joined by a
// veth pair (test_multihost.cpp, test_multihost_spmd.cpp). Needs root and iproute2's `ip`.
// The namespaces and the veth pair are named after this process's pid and removed in
// every path (also those a killed earlier run left behind); addresses come from
// 198.18.0.0/15 (RFC 2544, for tests) and exist only inside the two namespaces.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace axle::test {

/// The path of iproute2's ip, or "".
inline std::string find_ip() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}


// Two network namespaces A (198.18.0.1) and B (198.18.0.2) joined by a veth pair.
class TwoHosts {
 public:
  explicit TwoHosts(const std::string& ip) : ip_(ip) {
    remove_stale();
    const std::string id = "axmh" + std::to_string(::getpid());
    a_ = id + "a";
    b_ = id + "b";
    const std::string va = id + "x", vb = id + "y";
    const std::vector<std::string> steps = {
        "netns add " + a_,
        "netns add " + b_,
        "-n " + a_ + " link add " + va + " type veth peer name " + vb + " netns " + b_,
        "-n " + a_ + " addr add 198.18.0.1/24 dev " + va,
        "-n " + b_ + " addr add 198.18.0.2/24 dev " + vb,
        "-n " + a_ + " link set " + va + " up",
        "-n " + b_ + " link set " + vb + " up",
        "-n " + a_ + " link set lo up",
        "-n " + b_ + " link set lo up"};
    for (const std::string& step : steps) {
      const axle::test::Result r =
          axle::test::run_captured(ip_ + " " + step, axle::test::Stderr::kIntoStdout);
      if (r.status != 0) {
        why_ = "'ip " + step + "' failed: " + r.out;
        return;
      }
    }
  }
  ~TwoHosts() {
    // Deleting a namespace deletes the veth end inside it, and with it the pair.
    for (const std::string& ns : {a_, b_})
      if (!ns.empty()) axle::test::sh(ip_ + " netns del " + ns + " >/dev/null 2>&1");
    remove_host_names();
  }

  /// Host names for the two hosts, as a cluster's DNS gives them: inside each namespace
  /// `<prefix>1` resolves to host A and `<prefix>2` to host B (/etc/netns/NAME/hosts, which
  /// `ip netns exec` mounts over /etc/hosts); empty when that cannot be written, else why not.
  std::string name_hosts(const std::string& prefix) {
    const std::string hosts = axle::test::slurp("/etc/hosts") + "\n198.18.0.1 " + prefix + "1\n198.18.0.2 " + prefix + "2\n";
    made_netns_dir_ = !std::filesystem::exists("/etc/netns");
    for (const std::string& ns : {a_, b_}) {
      std::error_code ec;
      std::filesystem::create_directories("/etc/netns/" + ns, ec);
      std::ofstream f("/etc/netns/" + ns + "/hosts");
      f << hosts;
      if (ec || !f.good()) return "cannot write /etc/netns/" + ns + "/hosts";
    }
    return "";
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  /// Empty once both hosts are up, else why not.
  const std::string& why_not() const { return why_; }
  /// The veth ends inside hosts A and B.
  std::string a_interface() const { return a_.substr(0, a_.size() - 1) + "x"; }
  std::string b_interface() const { return b_.substr(0, b_.size() - 1) + "y"; }
  /// Prefix that runs a command on host A or B.
  std::string on(char host) const { return ip_ + " netns exec " + (host == 'a' ? a_ : b_) + " "; }

 private:
  // Namespaces of earlier runs whose process is gone (killed before its destructor ran).
  void remove_stale() {
    FILE* f = ::popen((ip_ + " netns list 2>/dev/null").c_str(), "r");
    if (!f) return;
    char line[512];
    std::vector<std::string> stale;
    // Lines look like "axmh<pid>a" or "axmh<pid>b (id: 3)". (No std::regex: GCC 12 warns
    // inside <regex> under the sanitizers, and CI builds with -Werror.)
    while (std::fgets(line, sizeof line, f)) {
      const std::string name = std::string(line).substr(0, std::string(line).find_first_of(" \n"));
      const size_t digits = name.size() >= 6 ? name.size() - 5 : 0;
      if (name.rfind("axmh", 0) != 0 || digits == 0 || (name.back() != 'a' && name.back() != 'b') ||
          name.find_first_not_of("0123456789", 4) != name.size() - 1)
        continue;
      if (::kill(std::stoi(name.substr(4, digits)), 0) != 0) stale.push_back(name);
    }
    ::pclose(f);
    for (const std::string& ns : stale) {
      axle::test::sh(ip_ + " netns del " + ns + " >/dev/null 2>&1");
      std::error_code ec;
      std::filesystem::remove_all("/etc/netns/" + ns, ec);
    }
  }

  void remove_host_names() {
    std::error_code ec;
    for (const std::string& ns : {a_, b_})
      if (!ns.empty()) std::filesystem::remove_all("/etc/netns/" + ns, ec);
    if (made_netns_dir_ && std::filesystem::is_empty("/etc/netns", ec)) std::filesystem::remove("/etc/netns", ec);
  }

  std::string ip_, a_, b_, why_;
  bool made_netns_dir_ = false;
};

}  // namespace axle::test
