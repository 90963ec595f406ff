// SPDX-License-Identifier: GPL-3.0-or-later
// The store server where cpp-httplib was not found at build time.
#include "remote_serving.h"

#include <cstdio>

namespace mantissa {

std::string serving_unavailable()
{
    return "--serve and serve are not available in this build of mantissa-train (it was built without "
           "cpp-httplib; install libcpp-httplib-dev and rebuild)";
}

std::string serve_address_problem(const std::string&) { return serving_unavailable(); }

int serve_store(const std::string&, const ServeOptions&, const std::atomic<bool>&)
{
    std::fprintf(stderr, "error: %s\n", serving_unavailable().c_str());
    return 2;
}

std::unique_ptr<LiveServer> LiveServer::start(RunSession&, RunStore&, const std::string&, const ServeOptions&)
{
    std::fprintf(stderr, "error: %s\n", serving_unavailable().c_str());
    return nullptr;
}

} // namespace mantissa
