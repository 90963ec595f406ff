// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The store server's requests and answers, without the HTTP (docs/REMOTE.md has the
// protocol): a request is a method, a path, its query parameters and a body; an answer is an
// HTTP status and a JSON document. Every refusal is a JSON object {"error": "..."}. Nothing
// in a request names a file: the store is the one the server was started on.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace mantissa {

struct ApiAnswer {
    int status = 200;
    std::string json;
};

ApiAnswer api_error(int status, const std::string& message);

// A steering command for a run that trains in the server's process.
struct ControlCommand {
    std::string command; // pause | resume | stop | checkpoint | layer_formats
    std::string pattern; // layer_formats: the layer glob
    std::string forward, dgrad, wgrad; // layer_formats: number format names
    std::string scaling;               // layer_formats: a scaling recipe's name, or "" to keep the layers' own
};

// Applies `command` to run `run_id` on behalf of `origin` ("remote 127.0.0.1"); returns the
// answer (200 accepted, 404 not training here, 400 bad pattern/format). Called on a server
// thread: it must only queue the command (Trainer::request_*), never wait for a step.
using ControlHandler = std::function<ApiAnswer(int64_t run_id, const ControlCommand& command, const std::string& origin)>;

class StorePool;

struct ApiContext {
    StorePool* stores = nullptr; // read-only connections to the served store
    bool allow_control = false;
    ControlHandler control; // empty: no run trains in this process
    std::function<int64_t()> training_run; // the run this process trains (its commands go there)
    const std::atomic<bool>* stopping = nullptr; // ends long polls early
};

// GET /v1/runs, GET /v1/runs/{id}/rows, POST /v1/runs/{id}/control.
ApiAnswer handle_api(const ApiContext& context, const std::string& method, const std::string& path,
                     const std::multimap<std::string, std::string>& params, const std::string& body,
                     const std::string& origin);

} // namespace mantissa
