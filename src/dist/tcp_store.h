// A small key-value store over TCP for multi-host rendezvous (PyTorch's TCPStore is
// the model): rank 0 serves at MASTER_ADDR:MASTER_PORT, every rank is a client.
#pragma once
#include <memory>
#include <string>

#include <gloo/rendezvous/store.h>

namespace axle::dist::detail {

class TcpStore : public gloo::rendezvous::Store {
 public:
  /// True if `key` is set (does not wait).
  virtual bool check(const std::string& key) = 0;
  /// This end of the connection to the store, as a numeric address: the address this
  /// host reaches MASTER_ADDR from.
  virtual std::string local_address() const = 0;
  /// The master's address as this rank reached it (numeric).
  virtual std::string master_address() const = 0;
};

/// Connects to (and on the master also serves) the store; waits up to `timeout_s`.
std::unique_ptr<TcpStore> make_tcp_store(const std::string& addr, int port, bool is_master, double timeout_s);

/// A numeric host string for a socket address ("10.0.0.2", "fe80::1%eth0").
std::string numeric_host(const void* sockaddr_ptr, unsigned len);

}  // namespace axle::dist::detail
