// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Which keys of two (or more) resolved run configs differ: the compare page's config diff
// and `mantissa-train compare`. No LibTorch.
//
// Rules:
// - Objects are flattened to dotted keys ("optimizer.learning_rate").
// - Arrays are compared element by element, the index in brackets
//   ("precision.layers[0].forward"), so one changed layer override shows as one key. An empty
//   array or object is a leaf ("[]", "{}"). Arrays of different lengths show their extra
//   elements as keys present on one side only.
// - Numbers compare by value: 1 and 1.0 are equal. A number never equals a string or a bool.
// - Display text: strings as they are (no quotes), everything else as compact JSON.
// - A key present in some configs and not others is a difference (absent = std::nullopt).
// - Keys come in first-seen order: the first config's order, then keys only later ones have.

#include <optional>
#include <string>
#include <vector>

namespace mantissa {

struct ConfigDifference {
    std::string key;
    std::optional<std::string> a, b; // display text; nullopt where that config lacks the key
};

struct ConfigDifferenceN {
    std::string key;
    std::vector<std::optional<std::string>> values; // one per config, in the order given
};

// Throws ConfigError when a text is not valid JSON.
std::vector<ConfigDifference> diff_configs(const std::string& json_a, const std::string& json_b);
std::vector<ConfigDifferenceN> diff_configs(const std::vector<std::string>& jsons);

} // namespace mantissa
