// Limits for the agent's HTTP listener (/metrics, /healthz, /readyz), which
// every pod that can reach the port may connect to.
//
// cpp-httplib 0.11 (Debian 12's) serves each connection on a worker of a
// TaskQueue and has per-recv/send timeouts only: a client that sends one
// header byte every few seconds holds a worker forever, and its default pool
// (8 workers, an unbounded queue) is starved by 8 such clients. HttpGuard
// plugs into the library's own extension points (Server::new_task_queue, the
// pre-routing handler, the logger) and adds:
//   - a connection cap (agent.metrics.maxConnections) and a per-client cap
//     (maxConnectionsPerClient, by source address): a connection over either
//     gets "503" and is closed at once, never queued. Each admitted
//     connection has its own worker, so admitted clients never wait for
//     each other;
//   - deadlines per connection, enforced by a watchdog that shuts the socket
//     down: the request head must arrive within headerTimeout of the
//     connection (or of the previous response plus idleTimeout), a response
//     must be written within writeTimeout;
//   - counters for all of it, rendered by RenderMetrics().
// The library hands a TaskQueue only a closure, not the accepted socket: the
// guard finds that socket as the one connected socket on the listener's port
// that it does not track yet, by socket inode (accept(2) runs on the
// listening thread just before enqueue, one connection at a time, and returns
// the lowest free descriptor, so the scan is short), and keeps a dup of it, so
// the watchdog's shutdown(2) can never reach a reused descriptor number.
#pragma once

#include <httplib.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace shmkeeper::agent {

struct HttpLimits {
  int max_connections = 64;
  int max_connections_per_client = 8;
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds idle_timeout{5000};
  std::chrono::milliseconds write_timeout{30000};
};

// Owned by AgentServer; outlives the httplib::Server it is installed on (the
// server's TaskQueue calls back into it until listen_after_bind returns).
// Thread-safe.
class HttpGuard {
 public:
  enum Refusal { kMaxConnections, kMaxPerClient, kRefusalCount };
  enum Phase { kHeader, kResponse, kIdle, kPhaseCount };

  explicit HttpGuard(HttpLimits limits);
  ~HttpGuard();
  HttpGuard(const HttpGuard&) = delete;
  HttpGuard& operator=(const HttpGuard&) = delete;

  // Installs the guard on `server` bound to `port`, before listen_after_bind:
  // its task queue, read/write/keep-alive timeouts, a pre-routing handler that
  // marks the request head as complete and then asks `authorize` (may be
  // empty; returning false means it has filled `res` with the refusal), and a
  // logger that marks the response as written.
  using Authorize = std::function<bool(const httplib::Request&, httplib::Response&)>;
  void Install(httplib::Server* server, int port, Authorize authorize);

  // Prometheus text for the counters (shmkeeper_http_*).
  std::string RenderMetrics() const;

  struct Counts {
    uint64_t accepted = 0;
    std::array<uint64_t, kRefusalCount> refused{};
    std::array<uint64_t, kPhaseCount> timed_out{};
    uint64_t unauthorized = 0;
    int open = 0;
  };
  Counts counts() const;
  void CountUnauthorized();

 private:
  class Queue;
  struct Slot;
  friend class Queue;

  // The connected socket on port_ whose inode is not in `known`, or -1.
  int FindAcceptedSocket(const std::set<uint64_t>& known) const;
  // Admits (returns the slot) or refuses (sends 503, shuts the socket down,
  // returns null) the connection just accepted.
  std::shared_ptr<Slot> Admit();
  void Release(const std::shared_ptr<Slot>& slot);
  void Watchdog();
  void MarkHeadComplete();
  void MarkResponseWritten();
  void KillAll();

  const HttpLimits limits_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::set<std::shared_ptr<Slot>> slots_;
  std::map<std::string, int> per_client_;
  Counts counts_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace shmkeeper::agent
