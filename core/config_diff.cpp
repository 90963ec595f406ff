// SPDX-License-Identifier: GPL-3.0-or-later
#include "config_diff.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "project_config.h"

namespace mantissa {
namespace {

using json = nlohmann::ordered_json; // keeps each config's key order

struct Leaf {
    std::string key;
    const json* value;
};

void flatten(const json& j, const std::string& prefix, std::vector<Leaf>& out)
{
    if (j.is_object() && !j.empty()) {
        for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    } else if (j.is_array() && !j.empty()) {
        for (size_t i = 0; i < j.size(); ++i) flatten(j[i], prefix + "[" + std::to_string(i) + "]", out);
    } else {
        out.push_back({prefix.empty() ? std::string("(root)") : prefix, &j});
    }
}

bool same_value(const json& a, const json& b)
{
    if (a.is_number() && b.is_number()) {
        if (a.is_number_float() || b.is_number_float()) return a.get<double>() == b.get<double>();
        if (a.is_number_unsigned() && b.is_number_unsigned()) return a.get<uint64_t>() == b.get<uint64_t>();
        if (a.is_number_unsigned() || b.is_number_unsigned()) {
            const json& u = a.is_number_unsigned() ? a : b;
            const json& s = a.is_number_unsigned() ? b : a;
            return s.get<int64_t>() >= 0 && static_cast<uint64_t>(s.get<int64_t>()) == u.get<uint64_t>();
        }
        return a.get<int64_t>() == b.get<int64_t>();
    }
    return a == b;
}

std::string display(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

json parse(const std::string& text, size_t index)
{
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        throw ConfigError("config diff: config " + std::to_string(index + 1) + " is not valid JSON: " + json_error_words(e.what()));
    }
}

} // namespace

std::vector<ConfigDifferenceN> diff_configs(const std::vector<std::string>& jsons)
{
    std::vector<json> docs;
    docs.reserve(jsons.size());
    for (size_t i = 0; i < jsons.size(); ++i) docs.push_back(parse(jsons[i], i));

    std::vector<std::string> order; // keys in first-seen order
    std::unordered_map<std::string, std::vector<const json*>> values;
    std::vector<std::unordered_set<std::string>> empties(docs.size()); // keys holding [] or {}
    for (size_t i = 0; i < docs.size(); ++i) {
        std::vector<Leaf> leaves;
        flatten(docs[i], "", leaves);
        for (const auto& leaf : leaves) {
            auto [it, inserted] = values.try_emplace(leaf.key, docs.size(), nullptr);
            if (inserted) order.push_back(leaf.key);
            it->second[i] = leaf.value;
            if (leaf.value->is_structured()) empties[i].insert(leaf.key); // flatten leaves only empty ones
        }
    }
    const auto inside = [](const std::string& key, const std::string& parent) {
        return key.size() > parent.size() && key.compare(0, parent.size(), parent) == 0 &&
               (key[parent.size()] == '[' || key[parent.size()] == '.');
    };
    const auto under_empty = [&](size_t doc, const std::string& key) {
        for (const auto& e : empties[doc])
            if (inside(key, e)) return true;
        return false;
    };

    // A list or object empty in one config and holding entries in another (no precision.layers
    // against one override): the entries' rows say what differs, with "(none)" on the empty
    // side, not "(absent)" as if the setting were missing; the empty one's own row ("[]"
    // against "absent") would say it twice and is left out.
    std::vector<ConfigDifferenceN> out;
    for (const auto& key : order) {
        const auto& vs = values[key];
        bool differ = false;
        for (size_t i = 1; i < vs.size() && !differ; ++i)
            differ = (vs[i] == nullptr) != (vs[0] == nullptr) || (vs[i] && !same_value(*vs[i], *vs[0]));
        if (!differ) continue;
        const bool only_empty_or_absent =
            std::all_of(vs.begin(), vs.end(), [](const json* v) { return !v || v->is_structured(); });
        if (only_empty_or_absent &&
            std::any_of(order.begin(), order.end(), [&](const std::string& k) { return inside(k, key); }))
            continue;
        ConfigDifferenceN d{key, {}};
        for (size_t i = 0; i < vs.size(); ++i) {
            if (vs[i]) d.values.push_back(display(*vs[i]));
            else if (under_empty(i, key)) d.values.push_back(std::string("(none)"));
            else d.values.push_back(std::nullopt);
        }
        out.push_back(std::move(d));
    }
    return out;
}

std::vector<ConfigDifference> diff_configs(const std::string& json_a, const std::string& json_b)
{
    std::vector<ConfigDifference> out;
    for (auto& d : diff_configs(std::vector<std::string>{json_a, json_b}))
        out.push_back({std::move(d.key), std::move(d.values[0]), std::move(d.values[1])});
    return out;
}

} // namespace mantissa
