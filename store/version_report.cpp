// SPDX-License-Identifier: GPL-3.0-or-later
#include "version_report.h"

#include <sqlite3.h>

#include "build_info.h"

namespace mantissa {

std::string sqlite_version()
{
    return sqlite3_libversion();
}

std::vector<std::pair<std::string, std::string>> version_lines(const std::string& qt_version)
{
    const EngineVersions engine = engine_versions();
    return {{"Mantissa", engine.mantissa}, {"LibTorch", engine.libtorch}, {"CUDA", engine.cuda},
            {"cuDNN", engine.cudnn},       {"Qt", qt_version},            {"SQLite", sqlite_version()}};
}

std::string version_text(const std::string& program, const std::string& qt_version)
{
    const auto lines = version_lines(qt_version);
    std::string text = program + " " + lines.front().second;
    for (const auto& [component, version] : lines) text += "\n" + component + ": " + version;
    return text;
}

} // namespace mantissa
