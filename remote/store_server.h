// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run store served over HTTP/JSON (store_api.h; docs/REMOTE.md): read-only, with opt-in
// steering of a run that trains in the same process. Every request needs the bearer token;
// requests are limited in size, rate (per client address) and concurrency. The server reads
// the store through its own read-only connections and holds nothing per client, so a slow
// client only ever waits on itself.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "store_api.h"

namespace mantissa {

class RemoteError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct ServerOptions {
    std::string store_path;
    std::string host = "127.0.0.1";
    int port = 0; // 0: a free port, see StoreServer::port()
    std::string token; // required of every request (remote_token.h)
    bool allow_control = false;
    ControlHandler control; // a run training in this process; empty for `serve`
    std::function<int64_t()> training_run; // that run's id (listed as training_run), if any
    std::string tls_cert, tls_key; // PEM files; both or neither
    int max_clients = 8; // requests served at once (the thread pool); more wait
    double requests_per_s = 50; // per client address; above: 429
    double request_burst = 100;
    size_t max_body_bytes = 16 * 1024; // above: 413
};

// "[ADDR:]PORT" -> (ADDR, PORT), ADDR defaulting to 127.0.0.1. Throws RemoteError.
std::pair<std::string, int> parse_listen_address(const std::string& text);
bool is_loopback_host(const std::string& host);

class StoreServer {
public:
    // Throws RemoteError: bad options, the store cannot be opened, the address cannot be bound.
    explicit StoreServer(ServerOptions options);
    ~StoreServer(); // stops and joins
    StoreServer(const StoreServer&) = delete;
    StoreServer& operator=(const StoreServer&) = delete;

    int port() const;
    std::string url() const; // http[s]://HOST:PORT
    // With TLS, the SHA-256 of the certificate (DER) as "AB:CD:...", as `openssl x509
    // -fingerprint -sha256` prints it: what a desktop pins for a self-signed certificate.
    // "" without TLS.
    std::string certificate_sha256() const;
    void stop();
    int64_t requests_answered() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace mantissa
