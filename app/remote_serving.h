// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// mantissa-train's side of the store server (remote/, docs/REMOTE.md): `serve` and
// `run --serve`. Built as remote_serving_unavailable.cpp where cpp-httplib is missing.

#include <atomic>
#include <memory>
#include <string>

#include "telemetry.h"

namespace mantissa {

class RunSession;
class RunStore;

struct ServeOptions {
    std::string listen;     // [ADDR:]PORT
    bool allow_control = false;
    std::string token_file; // default: "<store>.token"
    std::string tls_cert, tls_key;
    double requests_per_s = 50;
};

// "" where this build has the server, else why not (the commands below then print it and fail).
std::string serving_unavailable();
// "" where `listen` ([ADDR:]PORT) can be served, else why not: checked before a run loads its
// data, so a mistyped --serve leaves no run behind.
std::string serve_address_problem(const std::string& listen);

// `mantissa-train serve`: serves the store until `stop` is set (Ctrl-C). Exit code.
int serve_store(const std::string& db_path, const ServeOptions& options, const std::atomic<bool>& stop);

// Serves the store while `session` trains, taking its commands when allowed. A sink, so that
// the control events it records carry the step the run is at.
class LiveServer : public TelemetrySink {
public:
    ~LiveServer() override = default;
    // Listening; nullptr after printing the reason to stderr. Started before the run is made
    // or claimed (a busy port leaves none behind), and said (announce: "listening on ...",
    // the token) once the run is there: a client that reads that line finds the run.
    static std::unique_ptr<LiveServer> start(RunSession& session, RunStore& store, const std::string& db_path,
                                             const ServeOptions& options);
    virtual void announce() = 0;
};

} // namespace mantissa
