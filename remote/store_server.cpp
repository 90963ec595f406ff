// SPDX-License-Identifier: GPL-3.0-or-later
#include "store_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <httplib.h>
#if defined(CPPHTTPLIB_OPENSSL_SUPPORT) && defined(MANTISSA_CERTIFICATE_FINGERPRINT)
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#endif

#include "rate_limiter.h"
#include "remote_token.h"
#include "run_store.h"
#include "store_pool.h"

namespace mantissa {

std::pair<std::string, int> parse_listen_address(const std::string& text)
{
    // A URL here would be taken apart at its last colon into the host "http://127.0.0.1", which
    // then fails to bind with a message about the address being in use.
    if (const auto scheme = text.find("://"); scheme != std::string::npos)
        throw RemoteError("'" + text + "' is a URL; give [ADDR:]PORT, such as '" + text.substr(scheme + 3) +
                          "' (the server speaks HTTPS when given --tls-cert and --tls-key, HTTP otherwise)");
    const auto colon = text.rfind(':');
    std::string host = colon == std::string::npos ? "127.0.0.1" : text.substr(0, colon);
    const std::string port_text = colon == std::string::npos ? text : text.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    int port = -1;
    const auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (host.empty() || port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() ||
        port < 0 || port > 65535)
        throw RemoteError("'" + text + "' is not [ADDR:]PORT with PORT from 0 to 65535 (0: any free port)");
    return {host, port};
}

bool is_loopback_host(const std::string& host)
{
    return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

struct StoreServer::Impl {
    ServerOptions options;
    std::unique_ptr<httplib::Server> http;
    RateLimiter limiter;
    std::unique_ptr<StorePool> stores;
    std::atomic<bool> stopping{false};
    std::atomic<int64_t> answered{0};
    ApiContext context;
    std::thread thread;
    int port = 0;
    std::string certificate_sha256;

    explicit Impl(ServerOptions o)
        : options(std::move(o)), limiter(options.requests_per_s, options.request_burst)
    {
    }
};

namespace {

void answer(httplib::Response& res, const ApiAnswer& a)
{
    res.status = a.status;
    res.set_content(a.json, "application/json");
}

// httplib's multimap of decoded query parameters, as store_api takes them.
std::multimap<std::string, std::string> params_of(const httplib::Request& req)
{
    return {req.params.begin(), req.params.end()};
}

} // namespace

namespace {
#if defined(CPPHTTPLIB_OPENSSL_SUPPORT) && defined(MANTISSA_CERTIFICATE_FINGERPRINT)
// The first certificate in a PEM file, hashed as its DER bytes: "" when it cannot be read.
std::string pem_certificate_sha256(const std::string& path)
{
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "r"), &std::fclose);
    if (!f) return {};
    std::unique_ptr<X509, void (*)(X509*)> cert(PEM_read_X509(f.get(), nullptr, nullptr, nullptr), &X509_free);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!cert || X509_digest(cert.get(), EVP_sha256(), md, &n) != 1) return {};
    static const char* kHex = "0123456789ABCDEF";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
        if (i) out += ':';
        out += kHex[md[i] >> 4];
        out += kHex[md[i] & 15];
    }
    return out;
}
#else
[[maybe_unused]] std::string pem_certificate_sha256(const std::string&) { return {}; } // no OpenSSL to read it with
#endif
} // namespace

StoreServer::StoreServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options)))
{
    Impl& d = *impl_;
    if (d.options.token.size() < 32) throw RemoteError("the server needs a token of 32 hex digits");
    if (d.options.tls_cert.empty() != d.options.tls_key.empty())
        throw RemoteError("TLS needs both --tls-cert and --tls-key");
    RunStore::open_read_only(d.options.store_path); // refuse a missing or foreign file now, not per request
    if (d.options.tls_cert.empty()) {
        d.http = std::make_unique<httplib::Server>();
    } else {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
        for (const auto& f : {d.options.tls_cert, d.options.tls_key})
            if (!std::filesystem::is_regular_file(f)) throw RemoteError("TLS file '" + f + "' does not exist");
        auto tls = std::make_unique<httplib::SSLServer>(d.options.tls_cert.c_str(), d.options.tls_key.c_str());
        if (!tls->is_valid())
            throw RemoteError("cannot use the TLS certificate '" + d.options.tls_cert + "' with key '" +
                              d.options.tls_key + "' (not PEM, or the key does not match)");
        d.http = std::move(tls);
        d.certificate_sha256 = pem_certificate_sha256(d.options.tls_cert);
#else
        throw RemoteError("this build of cpp-httplib has no TLS support: serve on 127.0.0.1 and use ssh -L");
#endif
    }
    d.stores = std::make_unique<StorePool>(d.options.store_path);
    d.context.stores = d.stores.get();
    d.context.allow_control = d.options.allow_control;
    d.context.control = d.options.control;
    d.context.training_run = d.options.training_run;
    d.context.stopping = &d.stopping;

    httplib::Server& http = *d.http;
    const int pool = std::max(1, d.options.max_clients);
    http.new_task_queue = [pool] { return new httplib::ThreadPool(static_cast<size_t>(pool)); };
    // cpp-httplib sets SO_REUSEPORT by default: a second server on a port that one already
    // serves would bind too, and the kernel would share the connections between the two (a
    // desktop talking to an old run's server half the time). SO_REUSEADDR alone rebinds a
    // port left in TIME_WAIT by a stopped server, and refuses one that is listening.
    http.set_socket_options([](socket_t sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    http.set_payload_max_length(d.options.max_body_bytes);
    http.set_keep_alive_timeout(5);
    http.set_read_timeout(10);
    http.set_write_timeout(10);
    // The token (compared in constant time), then the rate, counted apart for requests with
    // and without the token: through `ssh -L` every client is 127.0.0.1, and tokenless
    // requests (another local user, a web page aimed at the forwarded port) must not spend the
    // window's budget. A token guesser is slowed down in its own bucket. Then the API.
    http.set_pre_routing_handler([&d](const httplib::Request& req, httplib::Response& res) {
        const std::string auth = req.get_header_value("Authorization");
        static const std::string bearer = "bearer ";
        // The scheme's name is case-insensitive (RFC 7235): curl users write "bearer" too.
        const auto same = [](char b, char a) { return b == std::tolower(static_cast<unsigned char>(a)); };
        const bool has_bearer =
            auth.size() >= bearer.size() && std::equal(bearer.begin(), bearer.end(), auth.begin(), same);
        const bool authorized = has_bearer && tokens_equal(std::string_view(auth).substr(bearer.size()), d.options.token);
        // A command (the only POST) has a bucket of its own: a Stop must not be refused because
        // another window with the token polls rows hard from the same address.
        const char* bucket = !authorized ? "no token " : req.method == "POST" ? "command " : "token ";
        if (!d.limiter.allow(bucket + req.remote_addr)) {
            answer(res, api_error(429, "too many requests from " + req.remote_addr + "; slow down"));
            return httplib::Server::HandlerResponse::Handled;
        }
        if (!authorized) {
            answer(res, api_error(401, has_bearer ? "wrong token" :
                                  "a token is required: send 'Authorization: Bearer <token>' (it is in the server's "
                                  "token file, STORE.token unless --token-file named another)"));
            return httplib::Server::HandlerResponse::Handled;
        }
        // cpp-httplib bounds a body by its Content-Length only: a chunked one was read whole,
        // into the process that trains (400 MB took 360 MB of it). The API's bodies are small.
        if (req.has_header("Transfer-Encoding")) {
            answer(res, api_error(411, "send the body with a Content-Length (at most " +
                                           std::to_string(d.options.max_body_bytes) +
                                           " bytes): chunked bodies are refused"));
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    // Past the gate, every path goes to store_api; the routes only make httplib read a body
    // first (within the payload limit).
    const auto api = [&d](const httplib::Request& req, httplib::Response& res) {
        answer(res, handle_api(d.context, req.method, req.path, params_of(req), req.body, "remote " + req.remote_addr));
        ++d.answered;
    };
    http.Get(".*", api);
    http.Post(".*", api);
    http.Put(".*", api);
    http.Delete(".*", api);
    http.Patch(".*", api);
    // What httplib refuses itself (a malformed request, a body over the limit) still gets JSON.
    http.set_error_handler([&d](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return;
        if (res.status == 413)
            answer(res, api_error(413, "a request body holds at most " + std::to_string(d.options.max_body_bytes) +
                                           " bytes"));
        else answer(res, api_error(res.status, "bad request (HTTP " + std::to_string(res.status) + ")"));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        answer(res, api_error(500, "internal error"));
    });
    d.port = d.options.port == 0 ? http.bind_to_any_port(d.options.host)
                                 : (http.bind_to_port(d.options.host, d.options.port) ? d.options.port : -1);
    if (d.port <= 0)
        throw RemoteError("cannot listen on " + d.options.host + ":" + std::to_string(d.options.port) +
                          " (in use, or not an address of this machine)");
    d.thread = std::thread([&http] { http.listen_after_bind(); });
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::stop()
{
    Impl& d = *impl_;
    d.stopping = true;
    if (d.http) d.http->stop();
    if (d.thread.joinable()) d.thread.join();
}

std::string StoreServer::certificate_sha256() const { return impl_->certificate_sha256; }

int64_t StoreServer::requests_answered() const { return impl_->answered.load(); }

int StoreServer::port() const { return impl_->port; }

std::string StoreServer::url() const
{
    const std::string& h = impl_->options.host;
    const std::string host = h.find(':') != std::string::npos ? "[" + h + "]" : h;
    return (impl_->options.tls_cert.empty() ? "http://" : "https://") + host + ":" + std::to_string(impl_->port);
}

} // namespace mantissa
