// SPDX-License-Identifier: GPL-3.0-or-later
#include "legacy_events.h"

#include <cstdlib>
#include <regex>
#include <sstream>

namespace mantissa {
namespace {

std::vector<std::string> split_names(const std::string& list)
{
    std::vector<std::string> out;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
        const auto first = item.find_first_not_of(' ');
        if (first == std::string::npos) continue;
        out.push_back(item.substr(first, item.find_last_not_of(' ') - first + 1));
    }
    return out;
}

std::optional<GemmFormats> parse_formats(const std::string& text) // "e4m3/e5m2/e5m2"
{
    const std::regex pattern(R"(^([a-z0-9]+)/([a-z0-9]+)/([a-z0-9]+)$)");
    std::smatch m;
    if (!std::regex_match(text, m, pattern)) return std::nullopt;
    const auto f = parse_number_format(m[1].str()), d = parse_number_format(m[2].str()), w = parse_number_format(m[3].str());
    if (!f || !d || !w) return std::nullopt;
    return GemmFormats{*f, *d, *w};
}

} // namespace

RunEvent legacy_event(int64_t step, const std::string& tag, const std::string& message)
{
    RunEvent e;
    e.step = step;
    e.kind = parse_event_kind(tag).value_or(EventKind::Other);
    std::smatch m;
    switch (e.kind) {
    case EventKind::LossScaleBackoff:
    case EventKind::LossScaleGrowth:
        if (std::regex_search(message, m, std::regex(R"(^scale ([0-9.eE+-]+) -> ([0-9.eE+-]+))"))) {
            // strtod, not stod: "1e999" or "1-2" must not throw out of an upgrade (the text
            // stays the message either way).
            e.old_scale = std::strtod(m[1].str().c_str(), nullptr);
            e.new_scale = std::strtod(m[2].str().c_str(), nullptr);
        }
        [[fallthrough]];
    case EventKind::StepSkipped:
        if (const auto at = message.find("non-finite gradients in "); at != std::string::npos)
            e.layers = split_names(message.substr(at + std::string("non-finite gradients in ").size()));
        break;
    case EventKind::Checkpoint:
        e.path = message;
        break;
    case EventKind::Alert:
        e.watcher = tag.substr(std::string("alert_").size());
        // "<layer>: <finding>" when the alert concerned a layer (layer names have no blanks).
        if (std::regex_search(message, m, std::regex(R"(^([A-Za-z0-9_.]+): (.*)$)"))) {
            e.layers = {m[1].str()};
            e.text = m[2].str();
        } else {
            e.text = message;
        }
        break;
    case EventKind::WatchAction:
        if (std::regex_search(message, m, std::regex(R"(^([a-z0-9_]+): switched (\S+) to (\S+)$)"))) {
            e.watcher = m[1].str();
            e.layers = {m[2].str()};
            e.action = m[3].str();
        } else if (std::regex_search(message, m, std::regex(R"(^([a-z0-9_]+): pausing training$)"))) {
            e.watcher = m[1].str();
            e.action = "pause";
        } else {
            e.kind = EventKind::Other;
            e.text = message;
        }
        break;
    case EventKind::PrecisionChanged:
        if (std::regex_search(message, m, std::regex(R"(^(\S+) -> (\S+) \(([^)]*)\))"))) {
            e.pattern = m[1].str();
            e.new_formats = parse_formats(m[2].str());
            e.layers = split_names(m[3].str());
        }
        break;
    case EventKind::LayerBackends: {
        // "<layer> <f/d/w> <backend>; ..."
        std::stringstream in(message);
        std::string item;
        const std::regex entry(R"(^\s*(\S+) (\S+) (\S+)\s*$)");
        while (std::getline(in, item, ';'))
            if (std::regex_match(item, m, entry))
                if (const auto f = parse_formats(m[2].str()))
                    e.layer_states.push_back({m[1].str(), *f, "", m[3].str()});
        break;
    }
    default:
        e.text = message;
    }
    if (e.kind == EventKind::Other) {
        e.text = message;
        e.other_tag = tag;
    }
    return e;
}

} // namespace mantissa
