// The TCP store: rank 0 runs a tiny single-threaded server (poll over all clients);
// every rank, rank 0 included, talks to it as a client.
// Wire format: request = u8 cmd, u32 key length, key, [u32 value length, value];
// SET -> u8 ack; CHECK -> u8 present; GET -> u32 length (0xffffffff: missing), value.
#include "dist/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "axle/error.h"

namespace axle::dist::detail {
namespace {

enum : uint8_t { kSet = 1, kGet = 2, kCheck = 3 };
constexpr uint32_t kMissing = 0xffffffffu;

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}
bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

class Server {
 public:
  Server(int port) {
    fd_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool v6 = fd_ >= 0;
    if (!v6) fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    AXLE_CHECK(fd_ >= 0, "[dist] TCP store: socket() failed: ", std::strerror(errno));
    int one = 1, zero = 0;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
      ::setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(uint16_t(port));
      rc = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(uint16_t(port));
      rc = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(fd_, 128) != 0) {
      const int e = errno;
      ::close(fd_);
      AXLE_FAIL("[dist] TCP store: cannot listen on port ", port, " (MASTER_PORT): ", std::strerror(e));
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~Server() {
    stop_ = true;
    thread_.join();
    for (int c : clients_) ::close(c);
    ::close(fd_);
  }

 private:
  void loop() {
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (int c : clients_) fds.push_back({c, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
      std::vector<int> keep;
      for (size_t i = 1; i < fds.size(); ++i) {
        const int c = fds[i].fd;
        if (fds[i].revents && !serve(c)) {
          ::close(c);
          continue;
        }
        keep.push_back(c);
      }
      if (fds[0].revents & POLLIN) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          int one = 1;
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          keep.push_back(c);
        }
      }
      clients_ = std::move(keep);
    }
  }
  bool serve(int c) {
    uint8_t cmd;
    uint32_t klen;
    if (!read_all(c, &cmd, 1) || !read_all(c, &klen, 4) || klen > (1u << 20)) return false;
    std::string key(klen, '\0');
    if (!read_all(c, key.data(), klen)) return false;
    if (cmd == kSet) {
      uint32_t vlen;
      if (!read_all(c, &vlen, 4) || vlen > (1u << 28)) return false;
      std::vector<char> v(vlen);
      if (!read_all(c, v.data(), vlen)) return false;
      data_[key] = std::move(v);
      uint8_t ack = 1;
      return write_all(c, &ack, 1);
    }
    if (cmd == kCheck) {
      uint8_t present = data_.count(key) ? 1 : 0;
      return write_all(c, &present, 1);
    }
    if (cmd == kGet) {
      auto it = data_.find(key);
      uint32_t len = it == data_.end() ? kMissing : uint32_t(it->second.size());
      if (!write_all(c, &len, 4)) return false;
      return it == data_.end() || write_all(c, it->second.data(), it->second.size());
    }
    return false;
  }

  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<int> clients_;
  std::map<std::string, std::vector<char>> data_;
};

class TcpStoreImpl final : public TcpStore {
 public:
  TcpStoreImpl(const std::string& addr, int port, bool master, double timeout_s)
      : addr_(addr), port_(port), timeout_(std::chrono::milliseconds(int64_t(timeout_s * 1000))) {
    if (master) server_ = std::make_unique<Server>(port);
    connect();
  }
  ~TcpStoreImpl() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard<std::mutex> g(mu_);
    send_key(kSet, key);
    uint32_t n = uint32_t(data.size());
    uint8_t ack = 0;
    ensure(write_all(fd_, &n, 4) && write_all(fd_, data.data(), data.size()) && read_all(fd_, &ack, 1), "set");
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    std::lock_guard<std::mutex> g(mu_);
    send_key(kGet, key);
    uint32_t n = 0;
    ensure(read_all(fd_, &n, 4), "get");
    AXLE_CHECK(n != kMissing, "[dist] TCP store: key '", key, "' vanished");
    std::vector<char> v(n);
    ensure(read_all(fd_, v.data(), n), "get");
    return v;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> g(mu_);
    uint8_t present = 0;
    send_key(kCheck, key);
    ensure(read_all(fd_, &present, 1), "check");
    return present != 0;
  }
  std::string local_address() const override { return local_; }
  std::string master_address() const override { return peer_; }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& k : keys) {
      while (true) {
        uint8_t present = 0;
        {
          std::lock_guard<std::mutex> g(mu_);
          send_key(kCheck, k);
          ensure(read_all(fd_, &present, 1), "wait");
        }
        if (present) break;
        AXLE_CHECK(std::chrono::steady_clock::now() < deadline, "[dist] rendezvous at ", addr_, ":", port_,
                   " timed out after ", timeout.count() / 1000.0, " s waiting for '", k,
                   "': not every rank arrived");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

 private:
  void connect() {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::string last = "no address";
    while (true) {
      addrinfo hints{}, *res = nullptr;
      hints.ai_socktype = SOCK_STREAM;
      const std::string port = std::to_string(port_);
      int rc = ::getaddrinfo(addr_.c_str(), port.c_str(), &hints, &res);
      if (rc == 0) {
        for (addrinfo* a = res; a; a = a->ai_next) {
          int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
          if (fd < 0) continue;
          // A host that drops the connection attempt must not hold us past the deadline.
          const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
          const int64_t us = std::max<int64_t>(100000, left.count());
          timeval tv{time_t(us / 1000000), suseconds_t(us % 1000000)};
          ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
          if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            timeval none{0, 0};
            ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
            int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            fd_ = fd;
            sockaddr_storage sa{};
            socklen_t len = sizeof sa;
            if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) local_ = numeric_host(&sa, len);
            len = sizeof sa;
            if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) peer_ = numeric_host(&sa, len);
            break;
          }
          last = std::strerror(errno);
          ::close(fd);
        }
        ::freeaddrinfo(res);
      } else {
        last = ::gai_strerror(rc);
        // No such host is an answer, not a delay (EAI_AGAIN, a resolver not reachable yet, is
        // retried): waiting out the timeout would only hide the misspelt address.
        AXLE_CHECK(rc != EAI_NONAME, "[dist] rendezvous: the master address '", addr_,
                   "' does not resolve (", last, "): set MASTER_ADDR (or, under Slurm, SLURM_NODELIST's first host) "
                   "to a host name or address every rank can resolve");
      }
      if (fd_ >= 0) return;
      AXLE_CHECK(std::chrono::steady_clock::now() < deadline, "[dist] rendezvous: cannot reach the TCP store at ",
                 addr_, ":", port_, " (MASTER_ADDR:MASTER_PORT) within ", timeout_.count() / 1000.0, " s: ", last);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void send_key(uint8_t cmd, const std::string& key) {
    uint32_t n = uint32_t(key.size());
    ensure(write_all(fd_, &cmd, 1) && write_all(fd_, &n, 4) && write_all(fd_, key.data(), key.size()), "request");
  }
  void ensure(bool ok, const char* what) {
    AXLE_CHECK(ok, "[dist] TCP store at ", addr_, ":", port_, ": connection lost during ", what,
               " (did rank 0 exit?)");
  }

  std::string addr_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::string local_, peer_;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<TcpStore> make_tcp_store(const std::string& addr, int port, bool is_master, double timeout_s) {
  AXLE_CHECK(port > 0 && port < 65536, "[dist] expected MASTER_PORT in 1..65535, got ", port);
  return std::make_unique<TcpStoreImpl>(addr, port, is_master, timeout_s);
}

std::string numeric_host(const void* sa, unsigned len) {
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(static_cast<const sockaddr*>(sa), socklen_t(len), host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return "";
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);  // IPv4-mapped
  return h;
}

}  // namespace axle::dist::detail
