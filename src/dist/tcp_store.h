// A small key-value store over TCP for multi-host rendezvous (PyTorch's TCPStore is
// the model): rank 0 serves at MASTER_ADDR:MASTER_PORT, every rank is a client.
#pragma once
#include <memory>
#include <string>

#include <gloo/rendezvous/store.h>

namespace axle::dist::detail {

/// Connects to (and on the master also serves) the store; waits up to `timeout_s`.
std::unique_ptr<gloo::rendezvous::Store> make_tcp_store(const std::string& addr, int port, bool is_master, int world,
                                                       double timeout_s);

}  // namespace axle::dist::detail
