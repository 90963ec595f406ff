// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote_serving.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "number_format.h"
#include "project_config.h"
#include "remote_control_gate.h"
#include "remote_token.h"
#include "run_session.h"
#include "run_store.h"
#include "store_server.h"
#include "train_cli.h"

namespace mantissa {

namespace {

std::string token_file_of(const std::string& db_path, const ServeOptions& options)
{
    return options.token_file.empty() ? default_token_path(db_path) : options.token_file;
}

// The server's options from the command line's; prints the reason and returns false on error.
bool server_options(const std::string& db_path, const ServeOptions& in, ServerOptions& out)
{
    try {
        const auto [host, port] = parse_listen_address(in.listen);
        out.host = host;
        out.port = port;
        out.store_path = db_path;
        out.allow_control = in.allow_control;
        out.tls_cert = in.tls_cert;
        out.tls_key = in.tls_key;
        out.requests_per_s = in.requests_per_s;
        out.request_burst = 2 * in.requests_per_s;
        out.token = load_or_create_token(token_file_of(db_path, in));
        if (!is_loopback_host(host))
            std::fprintf(stderr, "warning: serving on %s, reachable from other machines%s\n", host.c_str(),
                         in.tls_cert.empty() ? " without TLS: the token and the runs travel in clear text" : "");
        return true;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return false;
    }
}

void print_listening(const StoreServer& server, const ServerOptions& options, const std::string& token_file_hint)
{
    // Tests and scripts read these lines: the actual port when 0 was asked for, and where the
    // token is. The token itself only on a terminal: a server's stdout usually goes to a log
    // (nohup.out, Slurm's output, tmux's logging) that other users of a shared machine can
    // read, which would defeat the token file's mode 0600.
    const std::string token =
        ::isatty(STDOUT_FILENO) ? options.token + " (in " + token_file_hint + ")" : "in " + token_file_hint;
    std::printf("listening on %s\ntoken: %s\ncontrol: %s\n", server.url().c_str(), token.c_str(),
                options.allow_control ? "allowed" : "refused (no --allow-control)");
    // A self-signed certificate is trusted by this fingerprint (the desktop's Connect dialog).
    if (!server.certificate_sha256().empty()) std::printf("certificate: SHA-256 %s\n", server.certificate_sha256().c_str());
    std::fflush(stdout);
}

class LiveServerImpl : public LiveServer {
public:
    // At the step the run starts from: a command before its first step (a resumed run's) is
    // recorded there, not at 0, which the resume's dropped steps would leave before it.
    LiveServerImpl(RunSession& session, RunStore& store)
        : session_(session), store_(store), step_(session.trainer().step())
    {
    }
    ~LiveServerImpl() override
    {
        ended_ = true;
        // The run has ended: a connected client gets a moment to fetch its last rows and status.
        if (server && server->requests_answered() > 0) std::this_thread::sleep_for(std::chrono::seconds(2));
        // Stopped here, before the members its request threads use (step_, ended_) are gone.
        server.reset();
    }
    void on_step(const StepMetrics& m) override { step_ = m.step; }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent& e) override
    {
        if (e.kind == EventKind::RunFinished || e.kind == EventKind::RunStopped || e.kind == EventKind::RunFailed)
            ended_ = true;
        if (e.kind == EventKind::Paused || e.kind == EventKind::Resumed) {
            std::scoped_lock lock(gate_mutex_);
            gate_.applied(e.kind == EventKind::Paused);
        }
    }

    ApiAnswer control(int64_t run_id, const ControlCommand& c, const std::string& origin)
    {
        if (run_id != session_.run_id())
            return api_error(404, "run " + std::to_string(run_id) + " is not training in this process (run " +
                                      std::to_string(session_.run_id()) + " is)");
        // The server stays up a moment after the end for the last rows: a command then would be
        // accepted for nothing, and its event recorded after the run's end.
        if (ended_) return api_error(409, "run " + std::to_string(run_id) + " has ended: nothing to " + c.command);
        std::string what = c.command;
        bool queued = false;
        // The step it was asked at: read after the queueing, it could be the step after the one the
        // command acted on ("resumed" at step 12, then "resume requested" at step 13).
        const int64_t asked_at = step_.load();
        try {
            // The check, the queueing and the gate's update as one: two clients' pauses both
            // passed the check, and both were accepted and recorded, the second applied as nothing.
            std::scoped_lock lock(gate_mutex_);
            if (g_stop_requested.load()) gate_.stopping(); // Ctrl-C at the terminal: the run is ending
            // A command that would change nothing, recorded, would tell the run's history of
            // steering that never happened.
            if (const std::string why = gate_.refusal(c.command); !why.empty())
                return api_error(409, "run " + std::to_string(run_id) + " " + why + ": nothing to " + c.command);
            if (c.command == "pause") queued = session_.request_pause();
            else if (c.command == "resume") queued = session_.request_resume();
            else if (c.command == "stop") queued = session_.request_stop();
            else if (c.command == "checkpoint") queued = session_.request_checkpoint();
            else {
                GemmFormats f;
                const auto format = [](const std::string& name, const std::string& fallback) {
                    const std::string n = name.empty() ? fallback : name;
                    const auto parsed = parse_number_format(n);
                    if (!parsed) throw ConfigError("unknown number format '" + n + "'");
                    return *parsed;
                };
                f.forward = format(c.forward, c.forward);
                f.dgrad = format(c.dgrad, c.forward);
                f.wgrad = format(c.wgrad, c.forward);
                std::optional<Fp8Scaling> scaling;
                if (!c.scaling.empty()) {
                    scaling = parse_fp8_scaling(c.scaling);
                    if (!scaling)
                        throw ConfigError("unknown scaling recipe '" + c.scaling + "' (one of " +
                                          fp8_scaling_names_joined() + ")");
                }
                queued = session_.request_layer_formats(c.pattern, f, scaling);
                what += " " + c.pattern + " -> " + format_name(f.forward) + "/" + format_name(f.dgrad) +
                        "/" + format_name(f.wgrad) + (scaling ? std::string(" ") + fp8_scaling_name(*scaling) : "");
            }
            if (queued) gate_.queued(c.command);
        } catch (const ConfigError& e) {
            return api_error(400, e.what());
        }
        // Past the last boundary (the final step, evaluation and checkpoint): nothing would apply it.
        if (!queued) {
            std::scoped_lock lock(gate_mutex_);
            return api_error(409, "run " + std::to_string(run_id) + " " + gate_.closed_reason() + ": nothing to " +
                                      c.command);
        }
        RunEvent e;
        e.step = asked_at;
        e.kind = EventKind::Other;
        e.other_tag = "remote_control";
        e.text = what + " requested by " + origin;
        store_.append_event(run_id, e);
        return {200, nlohmann::json{{"accepted", c.command}, {"run", run_id}}.dump()};
    }

    std::unique_ptr<StoreServer> server;
    ServerOptions options;  // what print_listening says: the address, TLS, control
    std::string token_hint; // where the token is kept
    void announce() override { print_listening(*server, options, token_hint); }

private:
    RunSession& session_;
    RunStore& store_;
    std::atomic<int64_t> step_{0};
    std::atomic<bool> ended_{false};
    std::mutex gate_mutex_; // the request threads' and the trainer's
    RemoteControlGate gate_;
};

} // namespace

std::string serving_unavailable() { return {}; }

namespace {

// Why nothing can listen on host:port now, or "": bound and released at once, so that a busy
// port is refused before a run store or a token file is made for a server that cannot start
// (a new store and a token file were left behind). The server binds it again when it starts.
std::string bind_problem(const std::string& host, int port)
{
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string where = host + ":" + std::to_string(port);
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
        return "cannot listen on " + where + " (not an address of this machine)";
    std::string problem;
    for (const addrinfo* a = found; a; a = a->ai_next) { // as the server, the first that binds
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes); // a closed server's TIME_WAIT is no hold
        const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
        const int error = errno;
        ::close(fd);
        if (bound) {
            problem.clear();
            break;
        }
        problem = "cannot listen on " + where +
                  (error == EADDRINUSE ? std::string(" (in use: another server on it?)")
                                       : " (" + std::string(std::strerror(error)) + ")");
    }
    ::freeaddrinfo(found);
    return problem;
}

} // namespace

std::string serve_address_problem(const std::string& listen)
{
    try {
        const auto [host, port] = parse_listen_address(listen);
        return port == 0 ? std::string() : bind_problem(host, port);
    } catch (const std::exception& e) {
        return e.what();
    }
}

int serve_store(const std::string& db_path, const ServeOptions& options, const std::atomic<bool>& stop)
{
    // The store first: a mistyped --db must not leave a token file behind it.
    try {
        (void)RunStore::open_read_only(db_path, /*quick_check=*/false);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    if (const std::string problem = serve_address_problem(options.listen); !problem.empty()) {
        std::fprintf(stderr, "error: %s\n", problem.c_str()); // before a token file is made for it
        return 2;
    }
    ServerOptions o;
    if (!server_options(db_path, options, o)) return 2;
    std::unique_ptr<StoreServer> server;
    try {
        server = std::make_unique<StoreServer>(o);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    } catch (const RemoteError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    print_listening(*server, o, token_file_of(db_path, options));
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server->stop();
    return 0;
}

std::unique_ptr<LiveServer> LiveServer::start(RunSession& session, RunStore& store, const std::string& db_path,
                                              const ServeOptions& options)
{
    ServerOptions o;
    if (!server_options(db_path, options, o)) return nullptr;
    auto live = std::make_unique<LiveServerImpl>(session, store);
    LiveServerImpl* raw = live.get();
    o.control = [raw](int64_t run_id, const ControlCommand& c, const std::string& origin) {
        return raw->control(run_id, c, origin);
    };
    o.training_run = [&session] { return session.run_id(); };
    try {
        live->server = std::make_unique<StoreServer>(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return nullptr;
    }
    live->options = o;
    live->token_hint = token_file_of(db_path, options);
    return live;
}

} // namespace mantissa
