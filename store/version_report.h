// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The one place that gathers every version --version and Help > About show: the engine's
// (Mantissa, LibTorch, CUDA, cuDNN), Qt's (passed in: the store and the CLI know no Qt) and
// SQLite's (only the store links SQLite).

#include <string>
#include <utility>
#include <vector>

namespace mantissa {

std::string sqlite_version(); // the library loaded at run time, "3.40.1"

// {"Mantissa", "0.1.0"}, {"LibTorch", ...}, {"CUDA", ...}, {"cuDNN", ...}, {"Qt", qt_version}, {"SQLite", ...}
std::vector<std::pair<std::string, std::string>> version_lines(const std::string& qt_version);
// The --version text: "<program> <version>" then one "Component: version" line each;
// no newline at the end.
std::string version_text(const std::string& program, const std::string& qt_version);

} // namespace mantissa
